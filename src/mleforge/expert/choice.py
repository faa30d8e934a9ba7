"""One sample's answer: a seeded, distinct choice of approach, and its completion text.

Choices depend only on `sampling.seed`, the state's id and the sample's index:
the n samples for one state differ, and a rerun repeats them exactly
(`seed=None` opts out). `completion_text` writes the plan in prose, then the
script in one fenced Python block.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from mleforge.agent.journal import Journal
from mleforge.agent.state import State
from mleforge.expert.description import describe
from mleforge.expert.profile import TaskProfile
from mleforge.expert.script import render_script
from mleforge.expert.spec import FOLDS, ScriptSpec, read_spec
from mleforge.policies.base import PolicyError

SPEC_SEEDS = 10_000  # the random_state of a sample's script is drawn from range(SPEC_SEEDS)


def choice_rng(seed: int | None, state: State, *salt: int) -> np.random.Generator:
    """The generator for one state's choices. `seed=None`: the caller opted out of reproducibility."""
    if seed is None:
        return np.random.default_rng()
    return np.random.default_rng([seed % 2**63, int(state.state_id[:15], 16), *salt])


def seeded_order(candidates: Sequence[tuple[ScriptSpec, int, float]], rng: np.random.Generator) -> list[ScriptSpec]:
    """Candidates `(spec, tier, weight)` in a seeded order: lower tiers first, and within a
    tier a weighted draw without replacement (Gumbel top-k). Sample j takes position j, so
    its choice depends on the seed, the state and j only, not on how many were asked."""
    keys = rng.gumbel(size=len(candidates))
    ranked = sorted(range(len(candidates)),
                    key=lambda i: (candidates[i][1], -(math.log(max(candidates[i][2], 1e-9)) + keys[i])))
    return list(dict.fromkeys(candidates[i][0] for i in ranked))


def sample_spec(ordered: list[ScriptSpec], index: int, seed: int | None, state: State) -> ScriptSpec:
    """Sample `index`'s spec: its place in the order, with a seed of its own (so repeats of
    one approach, once the order is used up, still differ)."""
    if not ordered:
        raise PolicyError(f"template policy: no approach suits task {state.task_id} at stage {state.stage}")
    spec_seed = int(choice_rng(seed, state, 1, index).integers(SPEC_SEEDS))
    return replace(ordered[index % len(ordered)], seed=spec_seed)


def tried_approaches(journal: Journal) -> set[tuple]:
    """The approaches the journal's own scripts took (foreign scripts have no spec)."""
    return {spec.approach() for node in journal.nodes if (spec := read_spec(node.code)) is not None}


@dataclass(frozen=True)
class Choice:
    """One sample's answer before rendering: the approach and the plan's opening."""

    spec: ScriptSpec
    opening: str  # what the plan says first: the idea followed, the error fixed, the improvement
    short: bool = False  # the opening is the whole plan (a short action: expert/short.py)


_OUTPUT_PHRASES = {
    "label": "the predicted label",
    "int_label": "an integer label",
    "probability": "the probability of the positive class",
    "class_probabilities": "one probability column per class",
    "number": "the predicted value",
    "ranking": "the {k} most likely labels, best first, separated by spaces",
}


def _plan_body(spec: ScriptSpec, profile: TaskProfile) -> str:
    counts = ", ".join(f"{len(getattr(profile, r))} {r}" for r in ("numeric", "categorical", "text", "date")
                       if profile.has(r))
    left_out = [r for r in spec.drop if profile.has(r)]
    dropped = f" (leaving out the {' and '.join(left_out)} columns)" if left_out else ""
    validation = "a stratified 20% holdout" if profile.classification else "a 20% holdout"
    if spec.validation == "kfold":
        validation = f"{FOLDS}-fold cross-validation"
    metric = profile.metric or "a proxy metric"
    output = _OUTPUT_PHRASES[profile.output].format(k=profile.k)
    return "\n".join([
        f"- Data: {profile.rows} training rows; feature columns by role: {counts or 'none found'}{dropped}.",
        f"- Model: {describe(spec, profile).split(' on ')[0]}, in one scikit-learn pipeline with the "
        "feature steps, so validation folds never leak into preprocessing.",
        f"- Validation: {validation}, scored with {metric} (written inline) and printed.",
        f"- Submission: refit on all training rows and write ./submission/submission.csv with columns "
        f"{', '.join((profile.id_column, *profile.target_columns))}: {output}.",
    ])


def completion_text(choice: Choice, profile: TaskProfile) -> str:
    """The plan in prose, then the script in one fenced Python block."""
    code = render_script(choice.spec, profile, describe(choice.spec, profile))
    if choice.short:
        return f"{choice.opening}\n\n```python\n{code}```\n"
    return f"{choice.opening}\n\nPlan:\n{_plan_body(choice.spec, profile)}\n\n```python\n{code}```\n"
