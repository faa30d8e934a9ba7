"""Short actions: the expert's debug and improve answers as small edits within a budget.

The CPU training preset caps a completion at a few hundred tokens and renders prompts with
the compact profile, so its SFT warm start must show answers of that length. With a
completion budget (`TemplatePolicy(completion_chars=...)`, which `mleforge collect` sets for
the compact profile) the expert answers debug and improve states with a plan of one or two
sentences and the smallest change it knows, and writes it as the edit blocks collect will
turn it into (`completion_chars_of`):

- improve: a neighbour of the current approach (a hyperparameter of the current model, the
  scaler, a text vocabulary, a column role in or out, the target's log, PCA), or another
  model family whose edit still fits; the script keeps its seed, so the change is the change;
- debug: restore the lines a foreign edit broke (the script no longer matches its approach's
  template), else the safer variants of `debug.py`, now with the script's own seed.

Every candidate is rendered, written as a short edit and measured; those over the budget are
never chosen (when none fits, the caller falls back to the long answer and collect counts the
sample as over budget, never cuts it). The rest are drawn like the long answers: seeded,
weighted, distinct per sample.

Bookkeeping. The `# template-spec:` header is the expert's own record of the approach. The
expert's script (what runs, what the journal keeps, what its next step reads) carries the new
header; the short edit does not rewrite it (`write_action(keep_bookkeeping=True)`) and the
compact prompt does not show it (`PromptConfig.hide_bookkeeping`). So the script a short
completion gives, applied to the state's real script, is the expert's script with the old
header: the same code, two comment lines apart. A script whose header no longer describes its
code (a model edited it) is read by `own_spec` as foreign, never misread.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from mleforge.agent.actions import edit_blocks, keep_base_bookkeeping, write_action
from mleforge.agent.elision import script_view
from mleforge.agent.state import State
from mleforge.expert.catalog import SCRIPT_BUDGET_S, catalog, script_seconds
from mleforge.expert.choice import Choice, choice_rng, seeded_order
from mleforge.expert.description import describe
from mleforge.expert.profile import TaskProfile
from mleforge.expert.script import render_script
from mleforge.expert.spec import DROPPABLE, ScriptSpec, ScriptSpecError, normalize, read_spec

ERROR_CHARS = 100  # of the error line quoted in a short debug plan


def expert_script(spec: ScriptSpec, profile: TaskProfile) -> str:
    """The script the expert writes for `spec` (its idea line is the spec's description)."""
    return render_script(spec, profile, describe(spec, profile))


def own_spec(code: str, profile: TaskProfile) -> ScriptSpec | None:
    """The spec of one of the expert's own scripts whose code is still what the header says
    (up to the bookkeeping lines), else None."""
    spec = read_spec(code)
    if spec is None:
        return None
    try:
        rendered = expert_script(spec, profile)
    except (ScriptSpecError, ValueError, KeyError):
        return None
    return spec if keep_base_bookkeeping(code, rendered) == code else None


def completion_chars_of(stage: str, plan: str, code: str, base_code: str) -> int | None:
    """Characters of the short completion from `base_code` to `code` with `plan` (as collect
    writes it), or None when there is no such edit (nothing changes but the header)."""
    try:
        return len(write_action(stage, plan, code, base_code, keep_bookkeeping=True))
    except ValueError:
        return None


def fits(stage: str, plan: str, spec: ScriptSpec, profile: TaskProfile, base_code: str, budget: int,
         view_chars: int = 0, keep: frozenset[int] = frozenset()) -> bool:
    """Whether `spec`'s script, as a short edit of `base_code` with `plan`, is within `budget`
    and (`view_chars` > 0) edits only lines that the compact prompt's view of `base_code` shows
    (`script_view` at that budget, never hiding `keep`: a debug prompt shows the lines its
    traceback names): collect leaves out an edit of a line the prompt hides."""
    try:
        code = expert_script(spec, profile)
    except (ScriptSpecError, ValueError, KeyError):
        return False
    chars = completion_chars_of(stage, plan, code, base_code)
    if chars is None or chars > budget:
        return False
    if view_chars <= 0:
        return True
    hidden = script_view(base_code, view_chars, keep, hide_bookkeeping=True).hidden
    edits = edit_blocks(base_code, keep_base_bookkeeping(base_code, code))
    return not any(line in hidden for block in edits for line in block.base_lines)


def _roles_kept(spec: ScriptSpec, profile: TaskProfile) -> bool:
    return any(profile.has(r) and r not in spec.drop for r in ("numeric", "categorical", "text", "date"))


def neighbours(spec: ScriptSpec, profile: TaskProfile) -> list[ScriptSpec]:
    """Small changes of `spec`, same seed and validation: the catalog's other settings of its
    family; each feature option (scaler, TF-IDF terms, PCA, the target's log) set to another
    value the catalog uses with this family (multinomial naive Bayes, say, keeps its min-max
    scaling: it needs non-negative input); a role of columns left out or taken back; the
    catalog's other families. Normalized, affordable (`script_seconds`), distinct, never `spec`."""
    same = [s for s in catalog(profile) if s.family == spec.family and s.regress == spec.regress]
    out = [replace(spec, params=s.params) for s in same]
    for option in ("scale", "text_max_features", "pca", "log_target"):
        values = dict.fromkeys(getattr(s, option) for s in same)
        out += [replace(spec, **{option: v}) for v in values if v != getattr(spec, option)]
    out += [replace(spec, drop=(*spec.drop, r)) for r in DROPPABLE if profile.has(r) and r not in spec.drop]
    out += [replace(spec, drop=tuple(d for d in spec.drop if d != r)) for r in spec.drop]
    out += [replace(s, validation=spec.validation) for s in catalog(profile) if s.family != spec.family]
    kept: dict[tuple, ScriptSpec] = {}
    for candidate in out:
        try:
            candidate = normalize(replace(candidate, seed=spec.seed), profile)
        except (ScriptSpecError, ValueError, KeyError):
            continue
        if candidate.approach() == spec.approach() or not _roles_kept(candidate, profile):
            continue
        if script_seconds(candidate, profile) <= SCRIPT_BUDGET_S:
            kept.setdefault(candidate.approach(), candidate)
    return list(kept.values())


def _family(spec: ScriptSpec, profile: TaskProfile) -> str:
    return describe(spec, profile).split(" on ")[0]


def change_phrase(old: ScriptSpec, new: ScriptSpec, profile: TaskProfile) -> str:
    """What a short improve does, as one clause: "n_estimators 100 -> 300", "min-max scale the
    numbers", "switch to Extra trees (300 trees)"."""
    if old.family != new.family or old.regress != new.regress:
        return f"switch to {_family(new, profile)}"
    parts = []
    old_params, new_params = old.kwargs, new.kwargs
    parts += [f"{k} {old_params.get(k, 'default')} -> {v}" for k, v in new.params if old_params.get(k) != v]
    parts += [f"{k} {v} -> default" for k, v in old.params if k not in new_params]
    if old.scale != new.scale:
        parts.append({"standard": "standardize", "minmax": "min-max scale", "none": "stop scaling"}[new.scale]
                     + " the numbers")
    if old.text_max_features != new.text_max_features:
        parts.append(f"TF-IDF terms {old.text_max_features} -> {new.text_max_features}")
    for role in sorted(set(new.drop) - set(old.drop)):
        parts.append(f"leave out the {role} columns")
    for role in sorted(set(old.drop) - set(new.drop)):
        parts.append(f"use the {role} columns again")
    if old.pca != new.pca:
        parts.append(f"reduce to {new.pca} PCA components" if new.pca else "drop the PCA step")
    if old.log_target != new.log_target:
        parts.append("fit log1p of the target" if new.log_target else "fit the raw target")
    if old.dense != new.dense and not parts:
        parts.append("dense features" if new.dense else "sparse features")
    return "; ".join(parts) or "retune the model"


def draw_short(candidates: list[tuple[ScriptSpec, int, float]], plans: Mapping[tuple, str], state: State,
               n: int, seed: int | None) -> list[Choice]:
    """n short choices drawn from (spec, tier, weight) candidates as the long answers are
    (expert/choice.seeded_order), each with its plan (`plans` by approach); [] for none.
    Sample j takes position j; past the end the order repeats (same seed: the change is the
    change, not another one)."""
    if not candidates:
        return []
    ordered = seeded_order(candidates, rng=choice_rng(seed, state, 0))
    return [Choice(s, plans[s.approach()], short=True) for s in (ordered[j % len(ordered)] for j in range(n))]


def short_error(line: str) -> str:
    """An error line cut for a one-sentence plan."""
    line = " ".join(line.split()).replace("`", "'")
    return line if len(line) <= ERROR_CHARS else line[: ERROR_CHARS - 3] + "..."
