"""The offline template expert: a scripted policy that writes real, varied solution scripts.

    policy = make_policy("template")                       # or TemplatePolicy(registry)
    [completions] = policy.generate([messages], n=4, states=[state])

It needs no LLM: it reads the structured `State` a prompt was rendered from
(`states=`; required), looks the task up in its `TaskRegistry`, and answers
with a short plan and one ```python block (the format
`mleforge.agent.actions.parse_completion` accepts):

- draft: follows one of the state's ideas if it has any, else a seeded,
  strength-weighted draw from the task's catalog of approaches;
- debug: for one of its own scripts (recognised by the `# template-spec:`
  header) a safer variant of the same approach chosen from the error it reads
  (fewer features, dense input, no PCA, cheaper validation, a simpler model);
  for a foreign script a fresh robust baseline;
- improve: a different approach than the target's, usually a stronger family
  or better hyperparameters, never one the journal already tried.

Choices depend only on `sampling.seed`, the state's id and the sample's index:
the n samples for one state differ, and a rerun repeats them exactly
(`seed=None` opts out, as for every policy). Token counts are estimates, about
four characters per token, since there is no tokenizer; `max_new_tokens` and
`stop` are not applied, because a script cut short is worthless as a
demonstration (`completion_tokens` tells the caller how long it is).
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from mleforge.agent.journal import Journal
from mleforge.agent.node import Node
from mleforge.agent.scriptgen import (
    FOLDS,
    ScriptSpec,
    TaskProfile,
    describe,
    make_spec,
    normalize,
    read_spec,
    render_script,
    task_profile,
)
from mleforge.agent.state import State
from mleforge.errors import MleforgeError
from mleforge.policies.base import (
    Completion,
    PolicyError,
    Prompt,
    SamplingConfig,
    Usage,
    UsageMeter,
    check_request,
)
from mleforge.policies.registry import register_policy
from mleforge.reference.solutions import WIDE_PCA
from mleforge.tasks.registry import TaskRegistry

MODEL = "template"
CHARS_PER_TOKEN = 4  # a rough rule for English and code; the template has no tokenizer
SPEC_SEEDS = 10_000  # the random_state of a sample's script is drawn from range(SPEC_SEEDS)


def estimate_tokens(chars: int) -> int:
    """Tokens a text of `chars` characters would take, about (see CHARS_PER_TOKEN)."""
    return max(1, math.ceil(chars / CHARS_PER_TOKEN)) if chars else 0


# --- the catalog ---------------------------------------------------------------------------------

Entry = tuple[str, dict[str, Any], dict[str, Any]]  # (family, estimator params, spec options)


def _classifier_grid(profile: TaskProfile) -> list[Entry]:
    text = profile.has("text")
    tfidf = [{"text_max_features": 1000}, {"text_max_features": 5000}] if text else [{}]
    wide_pca = [{}, {"pca": WIDE_PCA}] if profile.wide else [{}]
    grid = [("linear", {"C": c, "max_iter": 500}, {**f, **p}) for c in (0.1, 1.0, 10.0)
            for f in tfidf for p in wide_pca]
    if text:
        grid += [("multinomial_nb", {"alpha": a}, {**f, "scale": "minmax"}) for a in (0.1, 0.5, 1.0) for f in tfidf]
    else:
        grid.append(("gaussian_nb", {}, {}))
    return grid + _shared_grid(profile)


def _regressor_grid(profile: TaskProfile) -> list[Entry]:
    wide_pca = [{}, {"pca": WIDE_PCA}] if profile.wide else [{}]
    grid = [("linear", {"alpha": a}, p) for a in (1.0, 10.0, 100.0) for p in wide_pca]
    return grid + _shared_grid(profile)


def _boosting_cap(profile: TaskProfile) -> int:
    """Iterations that keep one fit to about 1,600 trees (each class grows one per iteration)."""
    return max(20, 1600 // max(profile.classes, 1))


def _boosting(profile: TaskProfile) -> list[tuple[float, int, int]]:
    """(learning rate, iterations, leaves). Boosting grows a tree per class per iteration:
    with many classes, fewer iterations at a faster rate keep a fit to seconds."""
    if profile.many_classes:
        cap = _boosting_cap(profile)
        return [(0.1, min(60, cap), 31), (0.2, min(100, cap), 15), (0.1, min(100, cap), 15)]
    return [(0.1, 100, 31), (0.05, 300, 15), (0.1, 200, 31), (0.03, 300, 31)]


def _shared_grid(profile: TaskProfile) -> list[Entry]:
    text = {"text_max_features": 1000} if profile.has("text") else {}
    grid: list[Entry] = [
        *(("knn", {"n_neighbors": k, "weights": w}, {}) for k in (5, 15, 50) for w in ("uniform", "distance")),
        ("knn", {"n_neighbors": 15, "weights": "distance"}, {"scale": "minmax"}),  # another distance
        *(("tree", {"max_depth": d, "min_samples_leaf": leaf}, {}) for d, leaf in ((4, 1), (8, 5), (12, 10))),
        *(("random_forest", {"n_estimators": n, "min_samples_leaf": leaf}, {})
          for n, leaf in ((100, 1), (300, 1), (300, 3))),
        *(("extra_trees", {"n_estimators": n, "min_samples_leaf": leaf}, {}) for n, leaf in ((100, 1), (300, 2))),
        *(("hist_gb", {"learning_rate": lr, "max_iter": it, "max_leaf_nodes": leaves}, {})
          for lr, it, leaves in _boosting(profile)),
        *(("mlp", {"hidden_layer_sizes": h, "alpha": a}, text) for h in ((100,), (128, 64)) for a in (1e-4, 1e-2)),
    ]
    if profile.wide:  # a forest on a PCA projection: a different, faster view of the pixels
        grid.append(("random_forest", {"n_estimators": 300, "min_samples_leaf": 1}, {"pca": WIDE_PCA}))
    return grid


# A script's budget on one core (the sandbox gives two), and what one fit costs, in seconds.
# The rates were measured on the built-in suite (single-threaded fits of rendered scripts:
# e.g. boosting 32 classes x 50 iterations on 1,430 rows, 9 s; a 100-tree forest on 12,321
# rows, 6 s); they overestimate more often than not.
SCRIPT_BUDGET_S = 60.0
SCRIPT_OVERHEAD_S = 3.0  # start-up, imports, reading the CSV files
FITS = {"holdout": 1.8, "kfold": 5.0}  # full-data fits a script pays for: 0.8 + 1, or 5 x 0.8 + 1


def _width(spec: ScriptSpec, profile: TaskProfile) -> int:
    """Columns the model sees, about."""
    if spec.pca:
        return spec.pca
    kept = {r for r in ("numeric", "categorical", "text", "date") if profile.has(r) and r not in spec.drop}
    return max(1, len(profile.numeric) * ("numeric" in kept) + 4 * len(profile.date) * ("date" in kept)
               + profile.category_levels * ("categorical" in kept)
               + spec.text_max_features * len(profile.text) * ("text" in kept))


def fit_seconds(spec: ScriptSpec, profile: TaskProfile) -> float:
    """What one fit on all training rows costs on one core, about (see SCRIPT_BUDGET_S)."""
    rows, width, params = profile.rows, _width(spec, profile), spec.kwargs
    per_class = profile.classes if profile.classes > 2 and not spec.regress else 1
    text = 5e-4 * rows * len(profile.text) if "text" not in spec.drop else 0.0  # TF-IDF of 1-2 grams
    if spec.family == "hist_gb":
        model = params.get("max_iter", 100) * per_class * (4e-3 + 2e-8 * rows * width)
    elif spec.family in ("random_forest", "extra_trees"):
        per_tree = (1e-5 if profile.problem == "regression" or spec.regress else 5e-6) * rows
        model = params.get("n_estimators", 100) * per_tree * (4 if text else 1)
    elif spec.family == "mlp":
        model = 5e-4 * rows * (1 + width / 1000)
    elif spec.family == "knn":
        model = 2e-10 * rows * rows * width
    elif spec.family in ("linear", "multinomial_nb", "gaussian_nb"):
        model = 5e-8 * rows * width * per_class
    else:  # constant, decision trees
        model = 1e-6 * rows * width
    return model + text


def script_seconds(spec: ScriptSpec, profile: TaskProfile) -> float:
    """What the whole script costs on one core, about: its fits plus start-up."""
    return SCRIPT_OVERHEAD_S + FITS[spec.validation] * fit_seconds(spec, profile)


def catalog(profile: TaskProfile) -> list[ScriptSpec]:
    """Every approach suited to the task once (seed 0): models x feature options x
    hyperparameters x validation, less those over the time budget (`script_seconds`)."""
    grid = _regressor_grid(profile) if profile.problem == "regression" else _classifier_grid(profile)
    if profile.problem == "ordinal":  # regress, then round: QWK rewards being close
        grid += [(f, p, {**o, "regress": True}) for f, p, o in _regressor_grid(profile)
                 if f in ("linear", "random_forest", "hist_gb")]
    if profile.metric == "rmsle":  # RMSLE is RMSE of log1p: fitting the log is the natural choice
        grid = [(f, p, {**o, "log_target": True}) for f, p, o in grid] + \
            [(f, p, o) for f, p, o in grid if f in ("linear", "hist_gb")]
    specs = [
        make_spec(family, profile, params=params, validation=validation, **options)
        for family, params, options in grid
        for validation in ("holdout", "kfold")
    ]
    affordable = [s for s in specs if script_seconds(s, profile) <= SCRIPT_BUDGET_S]
    by_idea: dict[str, ScriptSpec] = {}
    for spec in affordable:  # one approach per idea sentence, the first of any that read the same
        by_idea.setdefault(describe(spec, profile), spec)
    return list(by_idea.values())


def catalog_ideas(profile: TaskProfile) -> list[str]:
    """The catalog as idea sentences, one per approach."""
    return list(dict.fromkeys(describe(spec, profile) for spec in catalog(profile)))


FAMILY_STRENGTH = {
    "constant": 0, "tree": 1, "gaussian_nb": 1, "knn": 2, "linear": 2, "multinomial_nb": 2,
    "mlp": 3, "extra_trees": 3, "random_forest": 3, "hist_gb": 4,
}


def strength(spec: ScriptSpec, profile: TaskProfile) -> float:
    """A rough prior of how well an approach does, to weight draws (not a score)."""
    value = float(FAMILY_STRENGTH[spec.family])
    if profile.has("text") and spec.family in ("linear", "multinomial_nb"):
        value += 2  # sparse linear models are the classic strong text baselines
    if spec.family == "linear" and profile.problem == "regression" and not spec.log_target:
        value -= 0.5
    return value


# --- seeded, distinct choices ---------------------------------------------------------------------


def _rng(seed: int | None, state: State, *salt: int) -> np.random.Generator:
    """The generator for one state's choices. `seed=None`: the caller opted out of reproducibility."""
    if seed is None:
        return np.random.default_rng()
    return np.random.default_rng([seed % 2**63, int(state.state_id[:15], 16), *salt])


def _order(candidates: Sequence[tuple[ScriptSpec, int, float]], rng: np.random.Generator) -> list[ScriptSpec]:
    """Candidates `(spec, tier, weight)` in a seeded order: lower tiers first, and within a
    tier a weighted draw without replacement (Gumbel top-k). Sample j takes position j, so
    its choice depends on the seed, the state and j only, not on how many were asked."""
    keys = rng.gumbel(size=len(candidates))
    ranked = sorted(range(len(candidates)),
                    key=lambda i: (candidates[i][1], -(math.log(max(candidates[i][2], 1e-9)) + keys[i])))
    return list(dict.fromkeys(candidates[i][0] for i in ranked))


def _sample_spec(ordered: list[ScriptSpec], index: int, seed: int | None, state: State) -> ScriptSpec:
    """Sample `index`'s spec: its place in the order, with a seed of its own (so repeats of
    one approach, once the order is used up, still differ)."""
    if not ordered:
        raise PolicyError(f"template policy: no approach suits task {state.task_id} at stage {state.stage}")
    spec_seed = int(_rng(seed, state, 1, index).integers(SPEC_SEEDS))
    return replace(ordered[index % len(ordered)], seed=spec_seed)


def _tried(journal: Journal) -> set[tuple]:
    """The approaches the journal's own scripts took (foreign scripts have no spec)."""
    return {spec.approach() for node in journal.nodes if (spec := read_spec(node.code)) is not None}


# --- ideas from outside the catalog ------------------------------------------------------------

_FAMILY_WORDS = (
    ("hist_gb", ("boost", "gbm", "gbdt", "xgb", "catboost")),
    ("random_forest", ("random forest", "randomforest")),
    ("extra_trees", ("extra trees", "extra-trees", "extratrees", "extremely randomized")),
    ("multinomial_nb", ("multinomial naive bayes", "multinomialnb", "multinomial nb")),
    ("gaussian_nb", ("gaussian naive bayes", "gaussiannb", "gaussian nb")),
    ("knn", ("nearest neighbo", "knn", "k-nn")),
    ("mlp", ("mlp", "neural", "perceptron", "network")),
    ("tree", ("decision tree",)),
    ("linear", ("logistic", "linear", "ridge", "lasso", "elastic", "svm", "sgd")),
    ("constant", ("constant", "dummy")),
)
_WORD_RE = re.compile(r"[a-z0-9.]+")


def _words(text: str) -> set[str]:
    return set(_WORD_RE.findall(text.lower()))


def match_idea(idea: str, specs: Sequence[ScriptSpec], profile: TaskProfile) -> list[ScriptSpec]:
    """Catalog specs that implement a free-text idea, best match first.

    An idea written by `describe` matches its spec exactly; any other (an LLM's) is matched
    by the model family it names, the validation it asks for, then by shared words.
    """
    text = " ".join(idea.lower().split())
    exact = [s for s in specs if describe(s, profile).lower() == text]
    if exact:  # then its neighbours: the same family and validation, closest wording first
        words = _words(text)
        near = [s for s in specs if s.family == exact[0].family and s.validation == exact[0].validation
                and s not in exact]
        return exact + sorted(near, key=lambda s: -len(words & _words(describe(s, profile))))
    families = [f for f, words in _FAMILY_WORDS if any(w in text for w in words)]
    if "naive bayes" in text and not {"multinomial_nb", "gaussian_nb"} & set(families):
        families.append("multinomial_nb" if profile.has("text") else "gaussian_nb")
    pool = [s for s in specs if s.family in families] or list(specs)
    wants_cv = any(w in text for w in ("fold", "cross-val", "cross val", " cv"))
    wants_holdout = any(w in text for w in ("holdout", "hold-out", "held-out", "validation split"))
    if wants_cv != wants_holdout:
        pool = [s for s in pool if (s.validation == "kfold") == wants_cv] or pool
    words = _words(text)
    return sorted(pool, key=lambda s: -len(words & _words(describe(s, profile))))  # stable: catalog order


# --- what to write, stage by stage ---------------------------------------------------------------


@dataclass(frozen=True)
class Choice:
    """One sample's answer before rendering: the approach and the plan's opening."""

    spec: ScriptSpec
    opening: str  # what the plan says first: the idea followed, the error fixed, the improvement


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


def _draft(state: State, profile: TaskProfile, n: int, seed: int | None) -> list[Choice]:
    specs = catalog(profile)
    tried = _tried(state.journal)
    fresh = [s for s in specs if s.approach() not in tried] or specs
    rng = _rng(seed, state, 0)
    if state.ideas:
        # Each idea's best match first (in a seeded order), then its next-best matches.
        candidates, source = [], {}
        for idea in state.ideas:
            for rank, spec in enumerate(match_idea(idea, fresh, profile)[:4]):
                candidates.append((spec, min(rank, 1), 1.0))
                source.setdefault(spec, idea)
        ordered = _order(candidates, rng)
        chosen = [_sample_spec(ordered, j, seed, state) for j in range(n)]
        return [Choice(s, _idea_opening(source[replace(s, seed=0)], s, profile)) for s in chosen]
    ordered = _order([(s, 0, 1.0 + strength(s, profile)) for s in fresh], rng)
    return [Choice(s, f"Idea: {describe(s, profile)}.")
            for s in (_sample_spec(ordered, j, seed, state) for j in range(n))]


def _idea_opening(idea: str, spec: ScriptSpec, profile: TaskProfile) -> str:
    closest = describe(spec, profile)
    if closest.lower() == " ".join(idea.lower().split()):
        return f"Idea: {closest}."
    return f"Idea (suggested): {idea}\nImplemented as: {closest}."


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
        "hist_gb": {"learning_rate": 0.1, "max_iter": min(100, _boosting_cap(profile))},
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


def _debug(state: State, profile: TaskProfile, n: int, seed: int | None) -> list[Choice]:
    target = state.target
    error = last_error_line(target)
    own = read_spec(target.code)
    rng = _rng(seed, state, 0)
    tried = _tried(state.journal)
    if own is None:
        families = ["linear", "random_forest", "hist_gb"] + (["multinomial_nb"] if profile.has("text")
                                                              and profile.classification else [])
        weights = {"linear": 3.0, "multinomial_nb": 3.0, "random_forest": 2.0, "hist_gb": 2.0}
        ordered = _order([(_baseline(profile, f), 0, weights[f]) for f in families], rng)
        return [Choice(s, f"The previous script failed with `{error}`; rewrite it from scratch with a "
                          f"robust approach: {describe(s, profile)}.")
                for s in (_sample_spec(ordered, j, seed, state) for j in range(n))]
    every = _safer_variants(own, profile, f"{error} {target.error or ''}")
    variants = [(v, tier, why) for v, tier, why in every if v.approach() not in tried] or every
    why_of = {replace(v, seed=0): why for v, _, why in reversed(variants)}
    ordered = _order([(v, tier, 1.0) for v, tier, _ in variants], rng)
    chosen = [_sample_spec(ordered, j, seed, state) for j in range(n)]
    return [Choice(s, f"The previous attempt ({describe(own, profile)}) failed with `{error}`.\n"
                      f"Fix: {why_of[replace(s, seed=0)]}. New approach: {describe(s, profile)}.")
            for s in chosen]


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


def _improve(state: State, profile: TaskProfile, n: int, seed: int | None) -> list[Choice]:
    target = state.target
    current = read_spec(target.code)
    tried = _tried(state.journal) | ({current.approach()} if current else set())
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

    ordered = _order([(s, 0, weight(s)) for s in specs], rng=_rng(seed, state, 0))
    score = "?" if target.score is None else f"{target.score:.5g}"
    what = describe(current, profile) if current else "a script written by another policy"
    direction = "higher" if state.journal.direction == "higher" else "lower"
    return [Choice(s, f"The solution to improve scores {score} ({profile.metric or 'score'}, {direction} is "
                      f"better) with: {what}.\nImprovement: {describe(s, profile)}.\n"
                      f"Why: {_improvement_reason(current, s, profile)}.")
            for s in (_sample_spec(ordered, j, seed, state) for j in range(n))]


_STAGES = {"draft": _draft, "debug": _debug, "improve": _improve}


def completion_text(choice: Choice, profile: TaskProfile) -> str:
    """The plan in prose, then the script in one fenced Python block."""
    code = render_script(choice.spec, profile, describe(choice.spec, profile))
    return f"{choice.opening}\n\nPlan:\n{_plan_body(choice.spec, profile)}\n\n```python\n{code}```\n"


# --- the policy -----------------------------------------------------------------------------------


class TemplatePolicy:
    """The offline scripted expert (see the module doc). `registry` (or `data_dir`, for a
    registry of its own) finds each state's task; its public train.csv is read for roles."""

    def __init__(self, registry: TaskRegistry | None = None, *, data_dir: str | Path | None = None,
                 sampling: SamplingConfig | None = None):
        self.registry = registry if registry is not None else TaskRegistry(data_dir=data_dir)
        self.sampling = sampling or SamplingConfig()
        self._meter = UsageMeter()

    @property
    def model(self) -> str:
        return MODEL

    def generate(self, prompts: Sequence[Prompt], n: int = 1, sampling: SamplingConfig | None = None, *,
                 states: Sequence[Any] | None = None) -> list[list[Completion]]:
        messages = check_request(prompts, n)
        if states is None:
            raise PolicyError("the template policy writes scripts from the structured state, not the prompt "
                              "text: pass states=[...] (the State each prompt was rendered from)")
        if len(states) != len(messages):
            raise PolicyError(f"got {len(messages)} prompts but {len(states)} states; give one state per prompt")
        seed = (sampling or self.sampling).seed
        out = []
        for prompt, state in zip(messages, states):
            start = time.perf_counter()
            texts = self.texts(_as_state(state), n, seed)
            latency = time.perf_counter() - start
            prompt_tokens = estimate_tokens(sum(len(m["content"]) for m in prompt))
            completions = [Completion(t, "stop", prompt_tokens, estimate_tokens(len(t)), latency, MODEL)
                           for t in texts]
            self._meter.add(requests=1, completions=n, prompt_tokens=prompt_tokens,
                            completion_tokens=sum(c.completion_tokens for c in completions), latency_s=latency)
            out.append(completions)
        return out

    def texts(self, state: State, n: int, seed: int | None) -> list[str]:
        """The n completion texts for one state."""
        profile = self.profile(state.task_id)
        return [completion_text(choice, profile) for choice in _STAGES[state.stage](state, profile, n, seed)]

    def profile(self, task_id: str) -> TaskProfile:
        try:
            task = self.registry.get(task_id)
            return task_profile(task)
        except (MleforgeError, OSError) as exc:
            raise PolicyError(f"template policy: cannot read task {task_id!r}: {exc}") from exc

    def usage(self) -> Usage:
        return self._meter.snapshot()

    def close(self) -> None:
        """Nothing to free: the template holds no threads, servers or models."""


def _as_state(state: Any) -> State:
    if isinstance(state, State):
        return state
    if isinstance(state, Mapping):
        return State.from_dict(state)
    raise PolicyError(f"a state must be a State or its dict form; got {type(state).__name__}")


def _factory(name: str = "", **kwargs: Any) -> TemplatePolicy:
    """`make_policy("template", registry=..., data_dir=..., sampling=...)`; the name is unused."""
    unknown = sorted(set(kwargs) - {"registry", "data_dir", "sampling"})
    if unknown:
        raise PolicyError(f"template policy: unknown option(s) {', '.join(unknown)}; "
                          "known: data_dir, registry, sampling")
    return TemplatePolicy(**kwargs)


# Importing this module registers it; make_policy("template") imports it on first use.
register_policy("template", _factory)
