"""Standalone solution scripts from a task profile and an approach spec.

The offline template expert (`mleforge.policies.template`) writes real scripts
with this module: a `TaskProfile` says what the task looks like (roles of its
columns, metric, submission format), a `ScriptSpec` names an approach (a model
family of `mleforge.reference.solutions.FAMILIES` with its parameters, feature
options and a validation scheme), and `render_script` turns the two into one
Python file that runs in the sandbox with only numpy, pandas, scikit-learn and
scipy: it reads `input/`, prints a validation score computed with the task's
metric (written inline), refits on all training rows and writes
`submission/submission.csv` in the task's exact format.

Every script starts with a machine-readable header, `# template-spec: {json}`,
so a later debug or improve step can tell its own scripts from foreign ones
and know which approach a script took (`read_spec`).

`describe(spec, profile)` says which idea a spec implements, in one sentence;
the catalog of approaches built from these specs lives with the template
expert (`mleforge.policies.template.catalog`). Spec bounds (trees, boosting
iterations, TF-IDF vocabulary) keep one script to about a minute on two cores.
"""

from __future__ import annotations

import importlib
import json
import re
import string
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from functools import lru_cache
from typing import Any

import pandas as pd

from mleforge.grading.metrics import get_metric
from mleforge.reference.features import (
    TEXT_MIN_CHARS,
    TEXT_MIN_UNIQUE_RATIO,
    TEXT_MIN_WORDS,
    infer_roles,
)
from mleforge.reference.solutions import (
    FAMILIES,
    MANY_CLASSES,
    PROBABILITY_FLOOR,
    WIDE_COLUMNS,
    WIDE_PCA,
)
from mleforge.tasks.task import Task

SPEC_PREFIX = "# template-spec: "
SPEC_VERSION = 1
VALIDATIONS = ("holdout", "kfold")
FOLDS = 5
HOLDOUT = 0.2
SCALES = ("standard", "minmax", "none")
ROLES = ("numeric", "categorical", "text", "date")
DROPPABLE = ("categorical", "text", "date")
# Bounds that keep one script to about a minute on two cores (ScriptSpec enforces them).
MAX_TREES = 300
MAX_BOOSTING_ITERATIONS = 300
MAX_TEXT_FEATURES = 5000
N_JOBS = 2
_SPEC_RE = re.compile(r"^# template-spec: (\{.*\})\s*$", re.MULTILINE)


class ScriptSpecError(ValueError):
    """A spec names an unknown family, option or value."""


# --- what the task looks like ------------------------------------------------------------


@dataclass(frozen=True)
class TaskProfile:
    """What a script needs to know of a task: formats, metric, and its columns' roles
    (as `mleforge.reference.features.infer_roles` assigns them; the script re-derives them)."""

    task_id: str
    name: str
    modality: str
    problem: str
    metric: str | None  # a named metric; None when the task grades with its own function
    output: str  # label | int_label | probability | class_probabilities | number | ranking
    k: int | None  # map@K's K
    target: str
    id_column: str
    target_columns: tuple[str, ...]
    rows: int
    classes: int  # distinct training targets; 0 for regression
    category_levels: int = 0  # one-hot columns the categorical columns make, about
    numeric: tuple[str, ...] = ()
    categorical: tuple[str, ...] = ()
    text: tuple[str, ...] = ()
    date: tuple[str, ...] = ()

    @property
    def roles(self) -> dict[str, tuple[str, ...]]:
        return {role: getattr(self, role) for role in ROLES}

    @property
    def classification(self) -> bool:
        return self.problem != "regression"

    @property
    def wide(self) -> bool:
        """Many pixel columns: distance, boosting and neural models then work on PCA."""
        return self.modality == "image" and len(self.numeric) > WIDE_COLUMNS

    @property
    def many_classes(self) -> bool:
        return self.classes >= MANY_CLASSES

    def has(self, role: str) -> bool:
        return bool(getattr(self, role))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _output_kind(problem: str, metric_name: str | None, targets: tuple[str, ...]) -> tuple[str, int | None]:
    if metric_name is None:  # a task's own grade function: guess the form from the problem
        if problem == "regression":
            return "number", None
        return ("class_probabilities" if len(targets) > 1 else "label"), None
    metric = get_metric(metric_name)
    if metric.kind == "label":
        return ("int_label" if metric.name == "qwk" else "label"), None
    if metric.kind == "probability":
        return ("class_probabilities" if len(targets) > 1 else "probability"), None
    return metric.kind, metric.k  # number | ranking


def task_profile(task: Task) -> TaskProfile:
    """Read the task's public train.csv (cached by file and modification time) into a profile."""
    path = task.public_dir / "train.csv"
    stat = path.stat()
    return _profile(task, str(path), stat.st_mtime_ns, stat.st_size)


@lru_cache(maxsize=64)
def _profile(task: Task, path: str, mtime_ns: int, size: int) -> TaskProfile:
    spec = task.spec
    train = pd.read_csv(path)
    roles = infer_roles(spec, train)
    output, k = _output_kind(spec.problem, spec.metric, spec.submission.target_columns)
    classes = 0 if spec.problem == "regression" else int(train[spec.target].nunique())
    return TaskProfile(
        task_id=spec.id, name=spec.name, modality=spec.modality, problem=spec.problem,
        metric=spec.metric, output=output, k=k, target=spec.target or "",
        id_column=spec.submission.id_column, target_columns=spec.submission.target_columns,
        rows=len(train), classes=classes,
        # The one-hot encoder keeps at most 30 columns per feature, one of them for rare levels.
        category_levels=sum(min(30, int(train[c].nunique()) + 1) for c in roles.categorical),
        **{role: tuple(getattr(roles, role)) for role in ROLES},
    )


# --- what approach a script takes -------------------------------------------------------


def _freeze(value: Any) -> Any:
    """JSON lists back to tuples, so a spec stays hashable and round-trips exactly."""
    return tuple(_freeze(v) for v in value) if isinstance(value, (list, tuple)) else value


@dataclass(frozen=True)
class ScriptSpec:
    """One approach. `params` are estimator keyword arguments on top of the family's defaults
    (sorted `(name, value)` pairs of JSON values); the rest are feature and validation options.

    `drop` leaves roles of columns out (a safer variant after a feature step failed);
    `regress` fits a regressor and rounds to labels (ordinal tasks); `log_target` fits
    log1p(target) (RMSLE). `seed` seeds the split and every seeded estimator.
    """

    family: str
    params: tuple[tuple[str, Any], ...] = ()
    scale: str = "standard"
    dense: bool = False
    text_max_features: int = 2000
    pca: int | None = None
    drop: tuple[str, ...] = ()
    validation: str = "holdout"
    log_target: bool = False
    regress: bool = False
    seed: int = 0

    def __post_init__(self) -> None:
        if self.family not in FAMILIES:
            raise ScriptSpecError(f"unknown family {self.family!r}; expected one of {', '.join(FAMILIES)}")
        params = self.params.items() if isinstance(self.params, Mapping) else self.params
        object.__setattr__(self, "params", tuple(sorted((str(k), _freeze(v)) for k, v in params)))
        object.__setattr__(self, "drop", tuple(sorted(set(self.drop))))
        if self.scale not in SCALES:
            raise ScriptSpecError(f"scale must be one of {', '.join(SCALES)}; got {self.scale!r}")
        if self.validation not in VALIDATIONS:
            raise ScriptSpecError(f"validation must be one of {', '.join(VALIDATIONS)}; got {self.validation!r}")
        if not set(self.drop) <= set(DROPPABLE):
            raise ScriptSpecError(f"drop may name {', '.join(DROPPABLE)}; got {self.drop!r}")
        if not 1 <= self.text_max_features <= MAX_TEXT_FEATURES:
            raise ScriptSpecError(f"text_max_features must be in [1, {MAX_TEXT_FEATURES}]")
        if self.pca is not None and self.pca < 1:
            raise ScriptSpecError(f"pca must be a positive number of components; got {self.pca}")
        bounds = {"n_estimators": MAX_TREES} if self.family in ("random_forest", "extra_trees") else \
            {"max_iter": MAX_BOOSTING_ITERATIONS} if self.family == "hist_gb" else {}
        for key, bound in bounds.items():
            if not 1 <= self.kwargs.get(key, 1) <= bound:
                raise ScriptSpecError(f"{key} must be in [1, {bound}] to keep a run short; got {self.kwargs[key]}")

    @property
    def kwargs(self) -> dict[str, Any]:
        return dict(self.params)

    def with_params(self, **params: Any) -> ScriptSpec:
        return replace(self, params={**self.kwargs, **params})

    def approach(self) -> tuple:
        """Everything but the seed: two specs with equal approaches take the same approach."""
        return (self.family, self.params, self.scale, self.dense, self.text_max_features, self.pca,
                self.drop, self.validation, self.log_target, self.regress)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["params"] = {k: list(v) if isinstance(v, tuple) else v for k, v in self.params}
        data["drop"] = list(self.drop)
        return {"v": SPEC_VERSION, **data}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ScriptSpec:
        if not isinstance(data, Mapping) or data.get("v") != SPEC_VERSION:
            raise ScriptSpecError(f"not a version-{SPEC_VERSION} template spec")
        known = set(cls.__dataclass_fields__)
        try:
            return cls(**{k: v for k, v in data.items() if k in known})
        except TypeError as exc:
            raise ScriptSpecError(str(exc)) from None

    def header(self) -> str:
        return SPEC_PREFIX + json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))


def read_spec(code: str | None) -> ScriptSpec | None:
    """The spec in a script's `# template-spec:` header, or None for a foreign script."""
    match = _SPEC_RE.search(code or "")
    if match is None:
        return None
    try:
        return ScriptSpec.from_dict(json.loads(match.group(1)))
    except (ValueError, ScriptSpecError):
        return None


def uses_regressor(spec: ScriptSpec, profile: TaskProfile) -> bool:
    return profile.problem == "regression" or spec.regress


def make_spec(family: str, profile: TaskProfile, **options: Any) -> ScriptSpec:
    """A spec with the family's feature defaults (as the reference grid uses them)."""
    defaults = dict(FAMILIES[family].features or {})
    base: dict[str, Any] = {"scale": defaults.get("scale", "standard"), "dense": bool(defaults.get("dense")),
                            "text_max_features": int(defaults.get("text_max_features", 2000))}
    if profile.wide and family in ("knn", "gaussian_nb", "hist_gb", "mlp"):
        base["pca"] = WIDE_PCA
    return normalize(ScriptSpec(family, **{**base, **options}), profile)


# Settings an idea always names, even at their default value ("Random forest (100 trees)").
HEADLINE_PARAMS = ("C", "alpha", "n_estimators", "learning_rate", "max_iter", "n_neighbors",
                   "hidden_layer_sizes", "max_depth")


def normalize(spec: ScriptSpec, profile: TaskProfile) -> ScriptSpec:
    """The spec without parameters that repeat what the estimator would use anyway, so two
    specs that run the same model compare equal (headline settings are kept, to be named)."""
    path, family_defaults = _estimator_path(spec, profile)
    defaults = {**_estimator_defaults(path), **family_defaults}
    kept = {k: v for k, v in spec.params
            if k in HEADLINE_PARAMS or k not in defaults or _freeze(defaults[k]) != v}
    scaled = any(profile.has(r) and r not in spec.drop for r in ("numeric", "date"))
    # Scaling applies to numbers and dates only; without them every scale is the same model.
    return replace(spec, params=kept, scale=spec.scale if scaled else "none")


# --- ideas: one sentence per approach ------------------------------------------------------

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


# --- rendering ----------------------------------------------------------------------------------


@lru_cache(maxsize=64)
def _estimator_defaults(path: str) -> dict[str, Any]:
    """The estimator's constructor defaults (a cached dict: read it, never change it)."""
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)().get_params()


def _estimator_path(spec: ScriptSpec, profile: TaskProfile) -> tuple[str, dict[str, Any]]:
    """The spec's estimator import path and the family's default arguments for it."""
    family = FAMILIES[spec.family]
    regress = uses_regressor(spec, profile)
    path = family.regressor if regress else family.classifier
    if path is None:
        kind = "regression" if regress else "classification"
        raise ScriptSpecError(f"family {spec.family} has no {kind} estimator")
    return path, dict(family.regressor_defaults if regress else family.classifier_defaults)


def _estimator(spec: ScriptSpec, profile: TaskProfile) -> tuple[str, str, str]:
    """(module, class name, constructor call) of the spec's estimator."""
    path, family_defaults = _estimator_path(spec, profile)
    kwargs = {**family_defaults, **spec.kwargs}
    known = _estimator_defaults(path)
    unknown = sorted(set(kwargs) - set(known))
    if unknown:
        raise ScriptSpecError(f"{path} takes no parameter(s) {', '.join(unknown)}")
    args = [f"{k}={v!r}" for k, v in sorted(kwargs.items())]
    if "random_state" in known:
        args.append("random_state=SEED")
    if "n_jobs" in known and spec.family in ("random_forest", "extra_trees", "knn"):
        args.append(f"n_jobs={N_JOBS}")
    module, _, name = path.partition(":")
    return module, name, f"{name}({', '.join(args)})"


# The script's parts, as text with $NAME placeholders (string.Template: the code has no `$`).

_METRIC_CODE = {
    "accuracy": '''
def score(y_true, y_pred):
    """Accuracy: the share of exact label matches (higher is better)."""
    return float(np.mean(np.asarray(y_true).astype(str) == np.asarray(y_pred).astype(str)))
''',
    "macro_f1": '''
def score(y_true, y_pred):
    """Macro F1: the unweighted mean of the per-class F1 scores (higher is better)."""
    y_true, y_pred = np.asarray(y_true).astype(str), np.asarray(y_pred).astype(str)
    f1 = []
    for label in np.union1d(y_true, y_pred):
        tp = np.sum((y_true == label) & (y_pred == label))
        fp = np.sum((y_true != label) & (y_pred == label))
        fn = np.sum((y_true == label) & (y_pred != label))
        f1.append(2 * tp / max(2 * tp + fp + fn, 1))
    return float(np.mean(f1))
''',
    "qwk": '''
def score(y_true, y_pred):
    """Quadratic weighted kappa between integer labels (higher is better)."""
    y_true, y_pred = np.asarray(y_true).astype(int), np.asarray(y_pred).astype(int)
    low = min(y_true.min(), y_pred.min())
    k = max(y_true.max(), y_pred.max()) - low + 1
    if k == 1:
        return 1.0
    observed = np.zeros((k, k))
    np.add.at(observed, (y_true - low, y_pred - low), 1)
    expected = np.outer(observed.sum(axis=1), observed.sum(axis=0)) / observed.sum()
    weights = (np.arange(k)[:, None] - np.arange(k)[None, :]) ** 2 / (k - 1) ** 2
    return float(1 - np.sum(weights * observed) / np.sum(weights * expected))
''',
    "roc_auc": '''
def score(y_true, y_pred):
    """ROC AUC: the chance that a random positive outranks a random negative (higher is better)."""
    y = np.asarray(y_true).astype(int)
    ranks = rankdata(np.asarray(y_pred, dtype=float))
    positives, negatives = y.sum(), len(y) - y.sum()
    return float((ranks[y == 1].sum() - positives * (positives + 1) / 2) / (positives * negatives))
''',
    "log_loss": '''
def score(y_true, y_pred):
    """Binary log loss of P(class 1) (lower is better)."""
    y = np.asarray(y_true, dtype=float)
    p = np.clip(np.asarray(y_pred, dtype=float), 1e-15, 1 - 1e-15)
    return float(-np.mean(y * np.log(p) + (1 - y) * np.log(1 - p)))
''',
    "log_loss_multi": '''
def score(y_true, y_pred):
    """Multiclass log loss over the submission's class columns (lower is better)."""
    onehot = np.asarray(y_true).astype(str)[:, None] == np.asarray(TARGET_COLUMNS)[None, :]
    p = np.asarray(y_pred, dtype=float)
    p = np.clip(p / p.sum(axis=1, keepdims=True), 1e-15, 1 - 1e-15)
    return float(-np.mean(np.sum(onehot * np.log(p), axis=1)))
''',
    "rmse": '''
def score(y_true, y_pred):
    """Root mean squared error (lower is better)."""
    return float(np.sqrt(np.mean((np.asarray(y_true, dtype=float) - np.asarray(y_pred, dtype=float)) ** 2)))
''',
    "mae": '''
def score(y_true, y_pred):
    """Mean absolute error (lower is better)."""
    return float(np.mean(np.abs(np.asarray(y_true, dtype=float) - np.asarray(y_pred, dtype=float))))
''',
    "rmsle": '''
def score(y_true, y_pred):
    """Root mean squared error of log(1 + x) (lower is better)."""
    diff = np.log1p(np.asarray(y_true, dtype=float)) - np.log1p(np.asarray(y_pred, dtype=float))
    return float(np.sqrt(np.mean(diff**2)))
''',
    "map": '''
def score(y_true, y_pred):
    """MAP@K: 1/rank of the true label among the first K guesses, else 0 (higher is better)."""
    total = 0.0
    for truth, guesses in zip(np.asarray(y_true).astype(str), y_pred):
        guesses = guesses.split()[:K]
        if truth in guesses:
            total += 1.0 / (guesses.index(truth) + 1)
    return total / len(y_true)
''',
}
# A task graded by its own function: score the holdout with a standard metric of its form.
_PROXY_METRIC = {"label": "accuracy", "number": "rmse", "class_probabilities": "log_loss_multi",
                 "probability": "log_loss", "int_label": "accuracy", "ranking": "map"}

_OUTPUT_CODE = {
    "label": '''
def predict_output(model, frame, y_fit):
    """Class labels, as the metric compares them."""
    return np.asarray(model.predict(frame))
''',
    "int_label": '''
def predict_output(model, frame, y_fit):
    """Integer labels, as quadratic weighted kappa compares them."""
    return np.asarray(model.predict(frame)).astype(int)
''',
    "int_label_regress": '''
def predict_output(model, frame, y_fit):
    """The regression rounded to the nearest label seen in training."""
    raw = np.asarray(model.predict(frame), dtype=float)
    return np.clip(np.rint(raw), y_fit.min(), y_fit.max()).astype(int)
''',
    "probability": '''
def predict_output(model, frame, y_fit):
    """P(positive class): the larger label (1 for 0/1 targets)."""
    proba = model.predict_proba(frame)
    positive = list(model.classes_).index(max(model.classes_))
    return $PROBABILITY
''',
    "class_probabilities": '''
def predict_output(model, frame, y_fit):
    """One probability column per class, in the submission's column order."""
    proba = model.predict_proba(frame)
    by_class = {str(c): proba[:, i] for i, c in enumerate(model.classes_)}
    # A class absent from the rows a model was fitted on gets probability zero.
    out = np.column_stack([by_class.get(c, np.zeros(len(frame))) for c in TARGET_COLUMNS])
    # Keep every class a little probable: a confident miss then costs ln(1/FLOOR), not ~34.
    out = np.clip(out, FLOOR, None)
    return out / out.sum(axis=1, keepdims=True)
''',
    "ranking": '''
def predict_output(model, frame, y_fit):
    """The K most probable labels per row, best first, separated by spaces."""
    proba = model.predict_proba(frame)
    labels = np.asarray([str(c) for c in model.classes_], dtype=object)
    order = np.argsort(-proba, axis=1, kind="stable")[:, :K]
    return np.asarray([" ".join(row) for row in labels[order]], dtype=object)
''',
    "number": '''
def predict_output(model, frame, y_fit):
    """Numeric predictions."""
    return $NUMBER
''',
}

_ROLES_CODE = '''
def column_roles(frame):
    """Each feature column's role: numeric, categorical, free text or ISO date."""
    roles = {"numeric": [], "categorical": [], "text": [], "date": []}
    for column in frame.columns:
        if column in (ID_COLUMN, TARGET, *TARGET_COLUMNS):
            continue
        values = frame[column]
        if pd.api.types.is_bool_dtype(values) or pd.api.types.is_numeric_dtype(values):
            roles["numeric"].append(column)
            continue
        present = values.dropna().astype(str)
        if len(present) and present.str.match(r"^\\d{4}-\\d{2}-\\d{2}(?:[T ].*)?$$").all():
            roles["date"].append(column)
            continue
        chars = present.str.len().mean() if len(present) else 0.0
        words = present.str.split().str.len().mean() if len(present) else 0.0
        distinct = present.nunique() / max(len(present), 1)
        # Long or many-worded, mostly distinct strings are free text; the rest are categories.
        is_text = (chars > $CHARS or words >= $WORDS) and distinct > $UNIQUE
        roles["text" if is_text else "categorical"].append(column)$TEXT_FALLBACK$DROPS
    return roles
'''

_TEXT_FALLBACK = '''
    if not roles["text"] and roles["categorical"]:
        # A text task always reads its text: the longest string column.
        longest = max(roles["categorical"], key=lambda c: frame[c].dropna().astype(str).str.len().mean())
        roles["categorical"].remove(longest)
        roles["text"].append(longest)'''

_HELPERS = {
    "categorical": '''
def as_object(frame):
    """Strings as plain objects with NaN for missing values, which every encoder accepts."""
    return frame.astype(object).where(frame.notna(), np.nan)
''',
    "text": '''
def fill_text(values):
    return ["" if pd.isna(v) else str(v) for v in values]
''',
    "date": '''
def date_parts(frame):
    """Year, month, day of week and day of year of each ISO date column (NaN if unparsable)."""
    parts = []
    for column in frame.columns:
        dates = pd.to_datetime(frame[column].astype(object), format="ISO8601", errors="coerce")
        parts += [dates.dt.year, dates.dt.month, dates.dt.dayofweek, dates.dt.dayofyear]
    return np.column_stack([np.asarray(part, dtype=float) for part in parts])
''',
}

_FEATURE_BLOCKS = {
    "numeric": '''
    if roles["numeric"]:
        numeric = make_pipeline(SimpleImputer(strategy="median")$SCALER)
        blocks.append(("numeric", numeric, roles["numeric"]))''',
    "date": '''
    if roles["date"]:
        dates = make_pipeline(FunctionTransformer(date_parts), SimpleImputer(strategy="median")$SCALER)
        blocks.append(("date", dates, roles["date"]))''',
    "categorical": '''
    if roles["categorical"]:
        categories = make_pipeline(
            FunctionTransformer(as_object),
            SimpleImputer(strategy="constant", fill_value="missing"),
            # Levels seen fewer than 10 times share one column; unseen levels encode as zeros.
            OneHotEncoder(handle_unknown="infrequent_if_exist", min_frequency=10, max_categories=30,
                          sparse_output=$SPARSE),
        )
        blocks.append(("categorical", categories, roles["categorical"]))''',
    "text": '''
    for column in roles["text"]:
        # A column name (not a list) hands the vectorizer the 1-D column of strings it expects.
        words = make_pipeline(
            FunctionTransformer(fill_text),
            TfidfVectorizer(ngram_range=(1, 2), max_features=$TEXT_MAX, sublinear_tf=True, min_df=2),
        )
        blocks.append((f"text_{column}", words, column))''',
}

_VALIDATION_CODE = {
    "holdout": '''
def validate(train, y, roles):
    """Fit on 80% of the training rows and score the other 20% with the task's metric."""
    stratify = $STRATIFY
    fit_rows, held_rows = train_test_split(
        np.arange(len(train)), test_size=$HOLDOUT, random_state=SEED, stratify=stratify
    )
    model = make_model(roles).fit(train.iloc[fit_rows], y.iloc[fit_rows])
    value = score(y.iloc[held_rows], predict_output(model, train.iloc[held_rows], y.iloc[fit_rows]))
    print(f"holdout {METRIC}: {value:.5f} (fit on {len(fit_rows)} rows, scored on {len(held_rows)})")
    return value
''',
    "kfold": '''
def validate(train, y, roles):
    """$FOLDS-fold cross-validation with the task's metric: mean and spread over the folds."""
    folds = $SPLITTER
    scores = []
    for fold, (fit_rows, held_rows) in enumerate(folds.split(train, y), start=1):
        model = make_model(roles).fit(train.iloc[fit_rows], y.iloc[fit_rows])
        scores.append(score(y.iloc[held_rows], predict_output(model, train.iloc[held_rows], y.iloc[fit_rows])))
        print(f"fold {fold}: {METRIC} {scores[-1]:.5f}")
    print(f"{FOLDS}-fold CV {METRIC}: {np.mean(scores):.5f} +/- {np.std(scores):.5f}")
    return float(np.mean(scores))
''',
}

_MAIN_CODE = '''
def main():
    train = pd.read_csv("input/train.csv")
    test = pd.read_csv("input/test.csv")
    columns = list(pd.read_csv("input/sample_submission.csv", nrows=0).columns)
    y = train[TARGET]
    roles = column_roles(train)
    print("feature columns by role:", {role: len(names) for role, names in roles.items()})
    validate(train, y, roles)

    # The final model sees every training row.
    model = make_model(roles).fit(train, y)
    values = predict_output(model, test, y)
    submission = pd.DataFrame({ID_COLUMN: test[ID_COLUMN].to_numpy()})
    for i, column in enumerate(TARGET_COLUMNS):
        submission[column] = values[:, i] if values.ndim == 2 else values
    os.makedirs("submission", exist_ok=True)
    submission[columns].to_csv("submission/submission.csv", index=False)
    print(f"wrote submission/submission.csv: {len(submission)} rows, columns {columns}")


if __name__ == "__main__":
    main()
'''


def _fill(template: str, **values: Any) -> str:
    return string.Template(template).substitute({k: str(v) for k, v in values.items()})


def _metric_section(profile: TaskProfile) -> tuple[str, str]:
    """(metric display name, score function) for the profile's metric or its proxy."""
    name = profile.metric
    if name is None:
        key = _PROXY_METRIC[profile.output]
        return f"{key} (a proxy for the task's own grader)", _METRIC_CODE[key]
    if name.startswith("map@"):
        return name, _METRIC_CODE["map"]
    if name == "log_loss" and profile.output == "class_probabilities":
        return name, _METRIC_CODE["log_loss_multi"]
    return name, _METRIC_CODE[name]


def _output_section(spec: ScriptSpec, profile: TaskProfile) -> str:
    kind = profile.output
    if kind == "int_label" and spec.regress:
        kind = "int_label_regress"
    clip_probability = profile.metric == "log_loss"
    return _fill(
        _OUTPUT_CODE[kind],
        PROBABILITY="np.clip(proba[:, positive], FLOOR, 1 - FLOOR)" if clip_probability else "proba[:, positive]",
        NUMBER=("np.clip(np.asarray(model.predict(frame), dtype=float), 0.0, None)  # RMSLE needs x >= 0"
                if profile.metric == "rmsle" else "np.asarray(model.predict(frame), dtype=float)"),
    )


def _roles_used(spec: ScriptSpec, profile: TaskProfile) -> list[str]:
    return [r for r in ROLES if profile.has(r) and r not in spec.drop]


def _features_section(spec: ScriptSpec, profile: TaskProfile) -> str:
    scaler = {"standard": ", StandardScaler()", "minmax": ", MinMaxScaler(clip=True)", "none": ""}[spec.scale]
    used = _roles_used(spec, profile) or ["numeric"]
    blocks = "".join(_fill(_FEATURE_BLOCKS[r], SCALER=scaler, SPARSE=not spec.dense,
                           TEXT_MAX=spec.text_max_features) for r in used)
    helpers = "".join(_HELPERS[r] + "\n" for r in used if r in _HELPERS)
    threshold = "0.0" if spec.dense or spec.pca else "0.3"
    what = "dense" if spec.dense or spec.pca else "sparse when mostly zeros"
    return f'''{helpers}
def build_features(roles):
    """One block of columns per role; the result is {what}."""
    blocks = []{blocks}
    return ColumnTransformer(blocks, remainder="drop", sparse_threshold={threshold})
'''


def _wrapped_call(prefix: str, call: str, width: int = 100) -> list[str]:
    """`prefix + call`, its arguments on a line of their own when one line would be too long."""
    if len(prefix) + len(call) <= width:
        return [prefix + call]
    name, _, args = call.partition("(")
    indent = " " * (len(prefix) - len(prefix.lstrip()))
    return [f"{prefix}{name}(", f"{indent}    {args[:-1]}", f"{indent})"]


def _model_section(spec: ScriptSpec, profile: TaskProfile, call: str) -> str:
    lines = ['    steps = [("features", build_features(roles))]']
    if spec.pca:
        lines.append(f'    steps.append(("pca", PCA(n_components={spec.pca}, random_state=SEED)))')
    lines += [*_wrapped_call("    estimator = ", call), '    steps.append(("model", estimator))',
              "    model = Pipeline(steps)"]
    scale_target = uses_regressor(spec, profile) and spec.family == "mlp"
    if spec.log_target and scale_target:
        lines.append("    # Fit log1p(target), standardized: what RMSLE rewards, at a scale the network likes.")
        lines.append("    target = make_pipeline(FunctionTransformer(np.log1p, np.expm1, check_inverse=False), "
                     "StandardScaler())")
        lines.append("    return TransformedTargetRegressor(model, transformer=target)")
    elif spec.log_target:
        lines.append("    # Fit log1p(target) and invert the predictions: what RMSLE rewards.")
        lines.append("    return TransformedTargetRegressor(model, func=np.log1p, inverse_func=np.expm1, "
                     "check_inverse=False)")
    elif scale_target:
        lines.append("    # A network learns a standardized target far more easily.")
        lines.append("    return TransformedTargetRegressor(model, transformer=StandardScaler())")
    else:
        lines.append("    return model")
    body = "\n".join(lines)
    return f'''
def make_model(roles):
    """Features and model as one pipeline, fitted on raw data frames."""
{body}
'''


def _validation_section(spec: ScriptSpec, profile: TaskProfile) -> str:
    classes = profile.classification
    stratify = "y if y.value_counts().min() >= 2 else None" if classes else "None"
    splitter = (
        "(StratifiedKFold if y.value_counts().min() >= FOLDS else KFold)(\n"
        "        n_splits=FOLDS, shuffle=True, random_state=SEED\n    )"
        if classes else "KFold(n_splits=FOLDS, shuffle=True, random_state=SEED)"
    )
    return _fill(_VALIDATION_CODE[spec.validation], STRATIFY=stratify, HOLDOUT=HOLDOUT,
                 FOLDS=FOLDS, SPLITTER=splitter)


def _needed_imports(spec: ScriptSpec, profile: TaskProfile, module: str, name: str) -> dict[str, set[str]]:
    used = _roles_used(spec, profile) or ["numeric"]
    need: dict[str, set[str]] = {
        "sklearn.compose": {"ColumnTransformer"},
        "sklearn.exceptions": {"ConvergenceWarning"},
        "sklearn.impute": {"SimpleImputer"},
        "sklearn.pipeline": {"Pipeline", "make_pipeline"},
        module: {name},
    }

    def add(mod: str, *names: str) -> None:
        need.setdefault(mod, set()).update(names)

    scaler = {"standard": "StandardScaler", "minmax": "MinMaxScaler"}.get(spec.scale)
    if scaler and ("numeric" in used or "date" in used):
        add("sklearn.preprocessing", scaler)
    if {"date", "categorical", "text"} & set(used):
        add("sklearn.preprocessing", "FunctionTransformer")
    if "categorical" in used:
        add("sklearn.preprocessing", "OneHotEncoder")
    if "text" in used:
        add("sklearn.feature_extraction.text", "TfidfVectorizer")
    if spec.pca:
        add("sklearn.decomposition", "PCA")
    scale_target = uses_regressor(spec, profile) and spec.family == "mlp"
    if spec.log_target or scale_target:
        add("sklearn.compose", "TransformedTargetRegressor")
    if scale_target:
        add("sklearn.preprocessing", "StandardScaler")
        if spec.log_target:
            add("sklearn.preprocessing", "FunctionTransformer")
    if spec.validation == "holdout":
        add("sklearn.model_selection", "train_test_split")
    else:
        add("sklearn.model_selection", "KFold", *(("StratifiedKFold",) if profile.classification else ()))
    if profile.metric == "roc_auc":
        add("scipy.stats", "rankdata")
    return need


def _imports_section(need: dict[str, set[str]]) -> str:
    # Thread counts are the sandbox's to set (OMP_NUM_THREADS and friends: its CPU share).
    third_party = [f"from {m} import {', '.join(sorted(need[m]))}" for m in sorted(need)]
    return "\n".join([
        "import os",
        "",
        "# Idle OpenMP threads sleep instead of spinning: on a busy machine spinning threads",
        "# starve the working ones, and boosting slows down tenfold. Set before numpy loads.",
        'os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")',
        "",
        "import warnings  # noqa: E402",
        "",
        "import numpy as np  # noqa: E402",
        "import pandas as pd  # noqa: E402",
        *(f"{line}  # noqa: E402" for line in third_party),
    ])


def _constants_section(spec: ScriptSpec, profile: TaskProfile, metric_name: str) -> str:
    lines = [
        f"SEED = {spec.seed}",
        # JSON strings and lists of strings are Python literals too (with double quotes).
        f"TARGET = {json.dumps(profile.target)}",
        f"ID_COLUMN = {json.dumps(profile.id_column)}",
        f"TARGET_COLUMNS = {json.dumps(list(profile.target_columns))}",
        f"METRIC = {json.dumps(metric_name)}",
    ]
    if spec.validation == "kfold":
        lines.append(f"FOLDS = {FOLDS}")
    if profile.output in ("class_probabilities", "probability") and profile.metric == "log_loss":
        lines.append(f"FLOOR = {PROBABILITY_FLOOR!r}  # the least probability any class gets")
    if profile.output == "ranking" or (profile.metric or "").startswith("map@"):
        lines.append(f"K = {profile.k or 3}  # guesses per row")
    lines += [
        "",
        "# Iteration caps are deliberate (a bounded run time); unseen categories are expected.",
        'warnings.filterwarnings("ignore", category=ConvergenceWarning)',
        'warnings.filterwarnings("ignore", category=UserWarning, module="sklearn")',
    ]
    return "\n".join(lines)


def render_script(spec: ScriptSpec, profile: TaskProfile, idea: str) -> str:
    """The complete standalone script that implements `spec` on the profiled task."""
    module, name, call = _estimator(spec, profile)
    metric_name, metric_code = _metric_section(profile)
    roles_code = _fill(
        _ROLES_CODE, CHARS=TEXT_MIN_CHARS, WORDS=TEXT_MIN_WORDS, UNIQUE=TEXT_MIN_UNIQUE_RATIO,
        TEXT_FALLBACK=_TEXT_FALLBACK if profile.modality == "text" else "",
        DROPS="".join(f'\n    roles["{r}"] = []  # left out: a safer, smaller feature set'
                      for r in spec.drop),
    )
    header = "\n".join([
        spec.header(),
        f"# Idea: {idea}",
        f"# Task: {profile.name} ({profile.task_id}); metric: {metric_name}.",
    ])
    sections = [
        header + "\n" + _imports_section(_needed_imports(spec, profile, module, name)),
        _constants_section(spec, profile, metric_name),
        metric_code.strip("\n"),
        roles_code.strip("\n"),
        _features_section(spec, profile).strip("\n"),
        _model_section(spec, profile, call).strip("\n"),
        _output_section(spec, profile).strip("\n"),
        _validation_section(spec, profile).strip("\n"),
        _MAIN_CODE.strip("\n"),
    ]
    return "\n\n\n".join(sections) + "\n"
