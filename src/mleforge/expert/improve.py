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
from mleforge.expert.short import change_phrase, draw_short, fits, neighbours, own_spec
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
    """n distinct improvements of the state's target, each a whole script (the short ones:
    short_improve_choices)."""
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


def short_improve_choices(state: State, profile: TaskProfile, n: int, seed: int | None, budget: int,
                          view_chars: int) -> list[Choice]:
    """n small changes of the current approach whose short edit fits `budget` characters
    (expert/short.py) and edits only lines a compact view of `view_chars` shows (0: any
    line): the same family's
    other settings, a feature option, or another family when even its edit fits. Weighted as
    the long answers are (stronger first, the same family twice as likely); [] when the target
    is not the expert's own script or nothing fits."""
    target = state.target
    current = own_spec(target.code, profile)
    if current is None:
        return []
    tried = tried_approaches(state.journal) | {current.approach()}
    base = strength(current, profile)
    candidates = []
    for spec in neighbours(current, profile):
        if spec.approach() in tried:
            continue
        plan = _short_plan(current, spec, profile)
        if fits("improve", plan, spec, profile, target.code, budget, view_chars):
            gain = strength(spec, profile) - base
            weight = math.exp(0.8 * gain) * (2.0 if spec.family == current.family else 1.0)
            candidates.append((spec, 0, weight))
    plans = {s.approach(): _short_plan(current, s, profile) for s, _, _ in candidates}
    return draw_short(candidates, plans, state, n, seed)


def _short_plan(old: ScriptSpec, new: ScriptSpec, profile: TaskProfile) -> str:
    """One or two sentences: the change, and why."""
    change = change_phrase(old, new, profile)
    if old.family == new.family:
        return f"Keep the {_family_name(old, profile)} and tune it: {change}."
    why = "usually stronger here" if strength(new, profile) > strength(old, profile) else \
        "its errors differ from the current model's"
    return f"{change[0].upper()}{change[1:]}: {why}."


def _family_name(spec: ScriptSpec, profile: TaskProfile) -> str:
    name = describe(spec, profile).split(" on ")[0].split(" (")[0]
    return name[0].lower() + name[1:] if not name[:2].isupper() else name
