"""Debug: for one of the expert's own scripts a safer variant of the same approach chosen
from the error it reads (fewer features, dense input, no PCA, cheaper validation, a
simpler model); for a foreign script a fresh robust baseline.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from mleforge.agent.elision import trace_lines
from mleforge.agent.node import Node
from mleforge.agent.state import State
from mleforge.expert.catalog import boosting_cap
from mleforge.expert.choice import Choice, choice_rng, sample_spec, seeded_order, tried_approaches
from mleforge.expert.description import describe
from mleforge.expert.profile import TaskProfile
from mleforge.expert.short import draw_short, fits, own_spec, short_error
from mleforge.expert.spec import ScriptSpec, make_spec, normalize, read_spec
from mleforge.reference.solutions import WIDE_PCA


def last_error_line(node: Node) -> str:
    """The line that says what went wrong: the last line of stderr, else the node's error."""
    stderr = node.execution.stderr if node.execution is not None else ""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    line = lines[-1] if lines else (node.error or "an unknown error")
    return line if len(line) <= 240 else line[:237] + "..."


def _cheaper(spec: ScriptSpec, profile: TaskProfile) -> ScriptSpec:
    """The same approach at a fraction of the cost: holdout, smaller models, fewer features."""
    params = spec.kwargs
    for key, cap in (("n_estimators", 100), ("max_iter", 100)):
        if key in params:
            params[key] = min(params[key], cap)
    if "hidden_layer_sizes" in params:
        params["hidden_layer_sizes"] = (64,)
    cheaper = replace(spec, params=params, validation="holdout", text_max_features=min(spec.text_max_features, 1000),
                      pca=WIDE_PCA if profile.wide and spec.family != "linear" else spec.pca)
    return normalize(cheaper, profile)


def _baseline(profile: TaskProfile, family: str = "linear") -> ScriptSpec:
    """A robust baseline of a family, with its safest settings."""
    params = {
        "linear": {"alpha": 10.0} if profile.problem == "regression" else {"C": 1.0, "max_iter": 500},
        "random_forest": {"n_estimators": 100, "min_samples_leaf": 2},
        "hist_gb": {"learning_rate": 0.1, "max_iter": min(100, boosting_cap(profile))},
        "multinomial_nb": {"alpha": 0.5},
        "constant": {"strategy": "mean" if profile.problem == "regression" else "prior"},
    }[family]
    options: dict[str, Any] = {"log_target": profile.metric == "rmsle" and family != "constant"}
    if family == "multinomial_nb":
        options["scale"] = "minmax"
    if family in ("random_forest", "hist_gb") and profile.has("text"):
        options["text_max_features"] = 300
    return make_spec(family, profile, params=params, **options)


_ERROR_FIXES = (
    (("time limit", "timed out", "timeout", "memory", "killed"), "cheaper",
     "make it cheaper: holdout validation, at most 100 trees or iterations, fewer text features"),
    (("sparse", "dense data"), "dense", "hand the model dense features"),
    (("pca", "n_components"), "no_pca", "drop the PCA step"),
    (("tfidf", "vocabulary", "text_"), "drop_text", "leave out the free-text columns"),
    (("datetime", "date_parts", "iso8601"), "drop_date", "leave out the date columns"),
    (("onehot", "categor", "could not convert string", "encoder"), "drop_categorical",
     "leave out the categorical columns"),
    (("n_splits", "least populated", "stratif", "folds"), "holdout", "validate on a plain holdout"),
)


def _variant(spec: ScriptSpec, profile: TaskProfile, fix: str) -> ScriptSpec:
    if fix == "cheaper":
        return _cheaper(spec, profile)
    if fix == "dense":
        return replace(spec, dense=True, text_max_features=min(spec.text_max_features, 1000))
    if fix == "no_pca":
        return replace(spec, pca=None, dense=True)
    if fix.startswith("drop_"):
        return replace(spec, drop=(*spec.drop, fix[5:]))
    return replace(spec, validation="holdout")


def _keeps_features(spec: ScriptSpec, profile: TaskProfile) -> bool:
    return any(profile.has(r) and r not in spec.drop for r in ("numeric", "categorical", "text", "date"))


def _safer_variants(spec: ScriptSpec, profile: TaskProfile, error: str) -> list[tuple[ScriptSpec, int, str]]:
    """(variant, tier, what changed): fixes the error points at first, then general fallbacks."""
    text = error.lower()
    out: list[tuple[ScriptSpec, int, str]] = []
    for words, fix, why in _ERROR_FIXES:
        if any(w in text for w in words):
            out.append((_variant(spec, profile, fix), 0, why))
    simpler = "linear" if spec.family != "linear" else "random_forest"
    out += [
        (_cheaper(spec, profile), 1, "make it cheaper and simpler: holdout validation, smaller model"),
        (replace(spec, drop=("categorical", "date", "text")), 1, "use only the numeric columns"),
        (replace(_baseline(profile, simpler), drop=spec.drop), 2,
         f"switch to a simpler, robust {simpler.replace('_', ' ')} model"),
        (_baseline(profile, "constant"), 3, "fall back to a constant baseline that cannot fail on the model"),
    ]
    return [(v, tier, why) for v, tier, why in out
            if v.approach() != spec.approach() and _keeps_features(v, profile)]


def debug_choices(state: State, profile: TaskProfile, n: int, seed: int | None) -> list[Choice]:
    """n distinct fixes of the state's failed target, each a whole script (the short ones:
    short_debug_choices)."""
    target = state.target
    error = last_error_line(target)
    own = read_spec(target.code)
    rng = choice_rng(seed, state, 0)
    tried = tried_approaches(state.journal)
    if own is None:
        families = ["linear", "random_forest", "hist_gb"] + (["multinomial_nb"] if profile.has("text")
                                                              and profile.classification else [])
        weights = {"linear": 3.0, "multinomial_nb": 3.0, "random_forest": 2.0, "hist_gb": 2.0}
        ordered = seeded_order([(_baseline(profile, f), 0, weights[f]) for f in families], rng)
        return [Choice(s, f"The previous script failed with `{error}`; rewrite it from scratch with a "
                          f"robust approach: {describe(s, profile)}.")
                for s in (sample_spec(ordered, j, seed, state) for j in range(n))]
    every = _safer_variants(own, profile, f"{error} {target.error or ''}")
    variants = [(v, tier, why) for v, tier, why in every if v.approach() not in tried] or every
    why_of = {replace(v, seed=0): why for v, _, why in reversed(variants)}
    ordered = seeded_order([(v, tier, 1.0) for v, tier, _ in variants], rng)
    chosen = [sample_spec(ordered, j, seed, state) for j in range(n)]
    return [Choice(s, f"The previous attempt ({describe(own, profile)}) failed with `{error}`.\n"
                      f"Fix: {why_of[replace(s, seed=0)]}. New approach: {describe(s, profile)}.")
            for s in chosen]


def short_debug_choices(state: State, profile: TaskProfile, n: int, seed: int | None, budget: int,
                        view_chars: int) -> list[Choice]:
    """n fixes whose short edit fits `budget` characters (expert/short.py) and edits only lines
    a compact view of `view_chars` shows (0: any line): first the approach's own script where the target
    no longer matches it (an edit broke it: restoring those lines is the minimal fix), then
    the safer variants, with the script's own seed. [] when the header names no approach or
    nothing fits."""
    target = state.target
    own = read_spec(target.code)
    if own is None:
        return []
    error = short_error(last_error_line(target))
    keep = trace_lines(target)  # the debug prompt shows them whatever its budget
    candidates: list[tuple[ScriptSpec, int, float]] = []
    plans: dict[tuple, str] = {}
    if own_spec(target.code, profile) is None:  # the code is not the header's approach any more
        plan = f"It fails with `{error}`: the edit broke it. Fix those lines; keep the approach."
        if fits("debug", plan, own, profile, target.code, budget, view_chars, keep):
            candidates.append((own, 0, 1.0))
            plans[own.approach()] = plan
    tried = tried_approaches(state.journal)
    every = _safer_variants(own, profile, f"{error} {target.error or ''}")
    variants = [(v, tier, why) for v, tier, why in every if v.approach() not in tried] or every
    for variant, tier, why in variants:
        variant = replace(variant, seed=own.seed)
        plan = f"It fails with `{error}`. Fix: {why}."
        if variant.approach() not in plans and fits("debug", plan, variant, profile, target.code, budget,
                                                           view_chars, keep):
            candidates.append((variant, tier + 1, 1.0))
            plans[variant.approach()] = plan
    return draw_short(candidates, plans, state, n, seed)
