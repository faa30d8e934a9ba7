"""Improve: a different approach than the target's, usually a stronger family or better
hyperparameters, never one the journal already tried.
"""

from __future__ import annotations

import math
from dataclasses import replace

from mleforge.agent.state import State
from mleforge.expert.catalog import catalog, strength
from mleforge.expert.choice import Choice, choice_rng, sample_spec, seeded_order, tried_approaches
from mleforge.expert.description import describe
from mleforge.expert.profile import TaskProfile
from mleforge.expert.spec import ScriptSpec, read_spec


def _changes(old: ScriptSpec, new: ScriptSpec) -> list[str]:
    """What differs between two approaches of one family, as `name old -> new`."""
    old_params, new_params = old.kwargs, new.kwargs
    changes = [f"{k} {old_params.get(k, 'default')} -> {v}" for k, v in new.params if old_params.get(k) != v]
    changes += [f"{k} {v} -> default" for k, v in old.params if k not in new_params]
    for option in ("scale", "dense", "text_max_features", "pca", "drop", "validation", "log_target", "regress"):
        before, after = getattr(old, option), getattr(new, option)
        if before != after:
            changes.append(f"{option} {before} -> {after}")
    return changes


def _improvement_reason(old: ScriptSpec | None, new: ScriptSpec, profile: TaskProfile) -> str:
    if old is None:
        return "a strong, well-validated approach from the catalog replaces the foreign script"
    if old.family == new.family:
        return "keep the model family and tune it: " + "; ".join(_changes(old, new))
    if strength(new, profile) > strength(old, profile):
        return f"{new.family.replace('_', ' ')} is usually stronger than {old.family.replace('_', ' ')} here"
    return (f"a different model family ({new.family.replace('_', ' ')}) whose errors differ from "
            f"{old.family.replace('_', ' ')}'s; the validation score will tell")


def improve_choices(state: State, profile: TaskProfile, n: int, seed: int | None) -> list[Choice]:
    target = state.target
    current = read_spec(target.code)
    tried = tried_approaches(state.journal) | ({current.approach()} if current else set())
    # Validation changes only the printed estimate, not the submitted model: no improvement.
    same_model = None if current is None else replace(current, validation="holdout", seed=0).approach()
    specs = [s for s in catalog(profile) if s.approach() not in tried
             and replace(s, validation="holdout").approach() != same_model]
    if not specs:  # everything was tried: retune the current approach's seed-free neighbours
        specs = [s for s in catalog(profile) if current is None or s.approach() != current.approach()]
    base = strength(current, profile) if current is not None else 2.0

    def weight(spec: ScriptSpec) -> float:
        gain = strength(spec, profile) - base
        same = current is not None and spec.family == current.family
        return math.exp(0.8 * gain) * (2.0 if same else 1.0)

    ordered = seeded_order([(s, 0, weight(s)) for s in specs], rng=choice_rng(seed, state, 0))
    score = "?" if target.score is None else f"{target.score:.5g}"
    what = describe(current, profile) if current else "a script written by another policy"
    direction = "higher" if state.journal.direction == "higher" else "lower"
    return [Choice(s, f"The solution to improve scores {score} ({profile.metric or 'score'}, {direction} is "
                      f"better) with: {what}.\nImprovement: {describe(s, profile)}.\n"
                      f"Why: {_improvement_reason(current, s, profile)}.")
            for s in (sample_spec(ordered, j, seed, state) for j in range(n))]
