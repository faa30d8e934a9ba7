"""Ideas: one sentence per approach. `describe(spec, profile)` says which idea a spec
implements (seeds left out); the catalog deduplicates approaches by it, and
`match_idea` finds the specs an idea sentence names.
"""

from __future__ import annotations

from typing import Any

from mleforge.expert.profile import ROLES, TaskProfile
from mleforge.expert.spec import FOLDS, ScriptSpec, uses_regressor

_FAMILY_NAMES = {
    "constant": ("Constant baseline (DummyClassifier)", "Constant baseline (DummyRegressor)"),
    "linear": ("Logistic regression", "Ridge regression"),
    "multinomial_nb": ("Multinomial naive Bayes", "Multinomial naive Bayes"),
    "gaussian_nb": ("Gaussian naive Bayes", "Gaussian naive Bayes"),
    "knn": ("k-nearest neighbours", "k-nearest neighbours regression"),
    "tree": ("Decision tree", "Decision tree regression"),
    "random_forest": ("Random forest", "Random forest regression"),
    "extra_trees": ("Extra trees", "Extra trees regression"),
    "hist_gb": ("Gradient boosting (HistGradientBoosting)", "Gradient boosting (HistGradientBoosting)"),
    "mlp": ("Neural network (MLP)", "Neural network (MLP regression)"),
}
# The settings that matter most come first in an idea sentence.
_PARAM_ORDER = ("C", "n_estimators", "learning_rate", "max_iter", "max_leaf_nodes", "max_depth",
                "min_samples_leaf", "n_neighbors", "weights", "hidden_layer_sizes", "alpha")


def _param_phrase(name: str, value: Any) -> str:
    if name == "n_estimators":
        return f"{value} trees"
    if name == "max_iter":
        return f"{value} iterations"
    if name == "max_leaf_nodes":
        return f"{value} leaves"
    if name == "n_neighbors":
        return f"k {value}"
    if name == "weights":
        return "distance-weighted" if value == "distance" else f"{value} weights"
    if name == "hidden_layer_sizes":
        return "hidden layers " + "-".join(str(v) for v in value)
    return f"{name} {value}"


def _features_phrase(spec: ScriptSpec, profile: TaskProfile) -> str:
    roles = [r for r in ROLES if profile.has(r) and r not in spec.drop]
    scaled = {"standard": "standardized", "minmax": "min-max scaled", "none": "raw"}[spec.scale]
    parts = {
        "numeric": f"{scaled} {'pixels' if profile.modality == 'image' else 'numerics'}",
        "categorical": "one-hot categoricals (rare levels grouped)",
        "text": f"TF-IDF word 1-2 grams ({spec.text_max_features} terms)",
        "date": "date parts (year, month, weekday, day of year)",
    }
    listed = [parts[r] for r in roles] or ["the numeric columns"]
    text = listed[0] if len(listed) == 1 else ", ".join(listed[:-1]) + " and " + listed[-1]
    if spec.pca:
        text += f", reduced by PCA to {spec.pca} components"
    return text


def describe(spec: ScriptSpec, profile: TaskProfile) -> str:
    """The idea a spec implements, as one sentence (seeds are left out)."""
    regress = uses_regressor(spec, profile)
    model = _FAMILY_NAMES[spec.family][1 if regress else 0]
    order = {name: i for i, name in enumerate(_PARAM_ORDER)}
    params = sorted(spec.params, key=lambda kv: (order.get(kv[0], len(order)), kv[0]))
    details = [_param_phrase(k, v) for k, v in params]
    if details:
        model = model[:-1] + ", " + ", ".join(details) + ")" if model.endswith(")") else f"{model} ({', '.join(details)})"
    target = ""
    if spec.log_target:
        target = " of log1p(target)"
    elif spec.regress and profile.problem != "regression":
        target = ", rounded to the nearest label,"
    validation = "a 20% holdout" if spec.validation == "holdout" else f"{FOLDS}-fold CV"
    return f"{model}{target} on {_features_phrase(spec, profile)}, with {validation}"
