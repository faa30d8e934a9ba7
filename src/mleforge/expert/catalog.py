"""The expert's catalog: every approach suited to a task once, within a script's time budget.

`catalog(profile)` crosses model families, feature options, hyperparameters and
validation, less what `script_seconds` estimates to be over budget, one spec per
idea sentence; `strength` is a rough prior of how well an approach does, used to
weight draws (never a score).
"""

from __future__ import annotations

from typing import Any

from mleforge.expert.description import describe
from mleforge.expert.profile import TaskProfile
from mleforge.expert.spec import ScriptSpec, make_spec
from mleforge.reference.solutions import WIDE_PCA

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


def boosting_cap(profile: TaskProfile) -> int:
    """Iterations that keep one fit to about 1,600 trees (each class grows one per iteration)."""
    return max(20, 1600 // max(profile.classes, 1))


def _boosting(profile: TaskProfile) -> list[tuple[float, int, int]]:
    """(learning rate, iterations, leaves). Boosting grows a tree per class per iteration:
    with many classes, fewer iterations at a faster rate keep a fit to seconds."""
    if profile.many_classes:
        cap = boosting_cap(profile)
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
# The rates come from single-threaded fits of rendered scripts on the built-in suite
# (`python benchmarks/agent.py` runs them); they overestimate more often than not, so that a
# script the expert writes finishes inside its budget.
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
