"""A catalog of real reference solutions of varied strength, written as data.

A `ReferenceSolution` is a family (constant, linear, knn, trees, boosting...), its
estimator parameters and a seed. `fit_predict` turns it into a scikit-learn
pipeline (task-agnostic features from `mleforge.reference.features` plus the
family's estimator), fits it on the public train frame and returns a submission
frame in the task's exact format. Because an entry is only names and numbers,
the same catalog can later be rendered into a standalone solution script.

A few parameters are recipe switches, not estimator arguments (`RECIPE_KEYS`):

    pca=N              seeded PCA to N components after the features (wide pixel data)
    scale=...          override the family's feature scaling (standard | minmax | none)
    text_max_features  TF-IDF vocabulary bound
    regress=True       ordinal tasks: fit the regressor, round and clip to the label range
    log_target=True    regression: fit on log1p(target), predict expm1 (suits RMSLE)
    scale_target=True  regression: standardize the target while fitting (neural nets)
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from mleforge.errors import ConfigError
from mleforge.grading.metrics import get_metric
from mleforge.reference.features import infer_roles, preprocessing_pipeline
from mleforge.tasks.task import Task

RECIPE_KEYS = ("pca", "scale", "text_max_features", "regress", "log_target", "scale_target")
# Log loss punishes a confident miss without bound; like most real entries, ours keep every
# class at least this probable (a miss then costs ln(1000) ~ 6.9 instead of 34.5).
PROBABILITY_FLOOR = 1e-3
# Above this many numeric columns an image task counts as wide: distance, boosting and neural
# models then work on a PCA projection, which keeps each fit to a few seconds.
WIDE_COLUMNS = 256
WIDE_PCA = 50


@dataclass(frozen=True)
class Family:
    """How a family of solutions is built: estimators by import path, feature options, defaults."""

    classifier: str | None
    regressor: str | None
    features: Mapping[str, Any] | None = field(default_factory=dict)  # None: the model sees no features
    classifier_defaults: Mapping[str, Any] = field(default_factory=dict)
    regressor_defaults: Mapping[str, Any] = field(default_factory=dict)


# Trees split dense columns much faster than sparse ones; a bounded TF-IDF keeps dense affordable.
_TREE_FEATURES = {"scale": "none", "dense": True, "text_max_features": 1000}
# Histogram boosting and Gaussian NB need dense input, and boosting bins every column.
_DENSE_FEATURES = {"scale": "none", "dense": True, "text_max_features": 300}

FAMILIES: dict[str, Family] = {
    # A constant ignores its inputs, so it skips building features (a TF-IDF costs seconds).
    "constant": Family("sklearn.dummy:DummyClassifier", "sklearn.dummy:DummyRegressor", None),
    "linear": Family(
        "sklearn.linear_model:LogisticRegression", "sklearn.linear_model:Ridge",
        {"scale": "standard"}, classifier_defaults={"max_iter": 300},
    ),
    "multinomial_nb": Family("sklearn.naive_bayes:MultinomialNB", None, {"scale": "minmax"}),
    "gaussian_nb": Family("sklearn.naive_bayes:GaussianNB", None, _DENSE_FEATURES),
    # Dense: distances between sparse one-hot rows are several times slower to compute.
    "knn": Family(
        "sklearn.neighbors:KNeighborsClassifier", "sklearn.neighbors:KNeighborsRegressor",
        {"scale": "standard", "dense": True, "text_max_features": 1000},
    ),
    "tree": Family("sklearn.tree:DecisionTreeClassifier", "sklearn.tree:DecisionTreeRegressor", _TREE_FEATURES),
    # Regression forests try a third of the features per split (Breiman's p/3) rather than
    # scikit-learn's all of them: as good in practice and several times faster on wide one-hots.
    "random_forest": Family(
        "sklearn.ensemble:RandomForestClassifier", "sklearn.ensemble:RandomForestRegressor", _TREE_FEATURES,
        regressor_defaults={"max_features": 0.33},
    ),
    "extra_trees": Family(
        "sklearn.ensemble:ExtraTreesClassifier", "sklearn.ensemble:ExtraTreesRegressor", _TREE_FEATURES,
        regressor_defaults={"max_features": 0.33},
    ),
    "hist_gb": Family(
        "sklearn.ensemble:HistGradientBoostingClassifier", "sklearn.ensemble:HistGradientBoostingRegressor",
        _DENSE_FEATURES,
        # Early stopping would carve a random validation split out of small train sets.
        classifier_defaults={"early_stopping": False}, regressor_defaults={"early_stopping": False},
    ),
    "mlp": Family(
        "sklearn.neural_network:MLPClassifier", "sklearn.neural_network:MLPRegressor", {"scale": "standard"},
        # A seeded 10% validation split stops training once it no longer improves.
        classifier_defaults={"max_iter": 200, "early_stopping": True},
        regressor_defaults={"max_iter": 300, "early_stopping": True},
    ),
}


def _load(import_path: str) -> type:
    module, _, name = import_path.partition(":")
    return getattr(importlib.import_module(module), name)


def uses_regressor(task: Task, params: Mapping[str, Any]) -> bool:
    return task.spec.problem == "regression" or bool(params.get("regress"))


@dataclass(frozen=True)
class ReferenceSolution:
    """One entry of the catalog: `family` names a `FAMILIES` record; `params` are the
    estimator's keyword arguments plus optional recipe switches (`RECIPE_KEYS`)."""

    name: str
    family: str
    params: Mapping[str, Any] = field(default_factory=dict, hash=False)
    seed: int = 0

    def __post_init__(self) -> None:
        if self.family not in FAMILIES:
            raise ConfigError(f"unknown solution family {self.family!r}; expected one of {', '.join(FAMILIES)}")

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "family": self.family, "params": dict(self.params), "seed": self.seed}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ReferenceSolution:
        return cls(data["name"], data["family"], dict(data.get("params") or {}), int(data.get("seed", 0)))

    def estimator(self, task: Task):
        """The unfitted estimator (no features), seeded wherever it takes a random_state."""
        family = FAMILIES[self.family]
        regress = uses_regressor(task, self.params)
        path = family.regressor if regress else family.classifier
        if path is None:
            kind = "regression" if regress else "classification"
            raise ConfigError(f"solution family {self.family} has no {kind} estimator ({self.name})")
        kwargs = dict(family.regressor_defaults if regress else family.classifier_defaults)
        kwargs.update({k: v for k, v in self.params.items() if k not in RECIPE_KEYS})
        estimator = _load(path)(**kwargs)
        if "random_state" in estimator.get_params():
            estimator.set_params(random_state=self.seed)
        return estimator

    def pipeline(self, task: Task, train: pd.DataFrame, memory: Any = None):
        """Features + estimator (+ target transform for regression), unfitted.

        `memory` (a joblib.Memory or folder) caches fitted features across solutions that
        share them; the result is identical with or without it.
        """
        from sklearn.pipeline import Pipeline

        steps = [("model", self.estimator(task))]
        family_options = FAMILIES[self.family].features
        if family_options is not None:
            options = {**family_options}
            options.update({k: self.params[k] for k in ("scale", "text_max_features") if k in self.params})
            roles = infer_roles(task.spec, train)
            steps = [*preprocessing_pipeline(roles, self.params.get("pca"), self.seed, **options).steps, *steps]
        model = Pipeline(steps, memory=memory)
        if uses_regressor(task, self.params) and (self.params.get("log_target") or self.params.get("scale_target")):
            model = _target_transformed(model, bool(self.params.get("log_target")), bool(self.params.get("scale_target")))
        return model

    def fit_predict(
        self, task: Task, train: pd.DataFrame, test: pd.DataFrame, memory: Any = None
    ) -> pd.DataFrame:
        """Fit on `train` and return the submission for `test`: ids from test, columns in order."""
        from sklearn.exceptions import ConvergenceWarning
        from threadpoolctl import threadpool_limits

        spec = task.spec
        y = train[spec.target]
        model = self.pipeline(task, train, memory)
        # One thread (BLAS, OpenMP; forests keep n_jobs=None): float sums then run in one
        # order on every machine, so a rebuilt leaderboard reproduces the committed one exactly.
        with threadpool_limits(limits=1), warnings.catch_warnings():
            # Iteration caps are deliberate here: a weak, unconverged entry is still an entry.
            warnings.simplefilter("ignore", ConvergenceWarning)
            model.fit(train, y)
            values = _predict(self, task, model, y, test)
        submission = pd.DataFrame({spec.submission.id_column: test[spec.submission.id_column].to_numpy()})
        for column, column_values in zip(spec.submission.target_columns, values):
            submission[column] = column_values
        return submission


def _target_transformed(model, log_target: bool, scale_target: bool):
    from sklearn.compose import TransformedTargetRegressor
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import FunctionTransformer, StandardScaler

    steps = []
    if log_target:
        steps.append(FunctionTransformer(np.log1p, np.expm1, check_inverse=False))
    if scale_target:
        steps.append(StandardScaler())
    return TransformedTargetRegressor(model, transformer=make_pipeline(*steps))


def _predict(solution: ReferenceSolution, task: Task, model, y: pd.Series, test: pd.DataFrame) -> list[np.ndarray]:
    """One array per submission target column, in the form the task's metric expects."""
    metric = get_metric(task.spec.metric or "")
    targets = task.spec.submission.target_columns
    if uses_regressor(task, solution.params):
        raw = np.asarray(model.predict(test), dtype=float)
        if task.spec.problem == "regression":
            return [np.clip(raw, 0.0, None) if metric.name == "rmsle" else raw]
        # Ordinal labels from a regressor: nearest integer within the labels seen in training.
        return [np.clip(np.rint(raw), y.min(), y.max()).astype(int)]
    if metric.kind == "label":
        return [model.predict(test)]
    proba = model.predict_proba(test)
    classes = list(model.classes_)
    if metric.kind == "ranking":
        # Best first; equal probabilities keep the classes' sorted order (stable sort).
        order = np.argsort(-proba, axis=1, kind="stable")[:, : metric.k]
        labels = np.asarray([str(c) for c in classes], dtype=object)
        return [np.array([" ".join(row) for row in labels[order]], dtype=object)]
    if metric.name == "log_loss":
        proba = np.clip(proba, PROBABILITY_FLOOR, None)
        proba = proba / proba.sum(axis=1, keepdims=True)
    if len(targets) == 1:
        # P(positive class): the larger of the two labels (1 for 0/1 targets).
        return [proba[:, classes.index(max(classes))]]
    by_name = {str(c): proba[:, i] for i, c in enumerate(classes)}
    # A class absent from train gets probability zero (the metric rescales each row).
    return [by_name.get(column, np.zeros(len(test))) for column in targets]


# --- the grid -------------------------------------------------------------------------------

# The "tuned" boosting entry: slower learning, smaller regularized trees, more of them.
_TUNED_GB = {
    "learning_rate": 0.05, "max_iter": 400, "max_leaf_nodes": 15, "min_samples_leaf": 10, "l2_regularization": 1.0,
}
# Boosting grows one tree per class per iteration: with many classes, fewer iterations
# (and a faster rate) keep a fit to seconds.
MANY_CLASSES = 10
_TUNED_GB_MANY = {**_TUNED_GB, "learning_rate": 0.1, "max_iter": 100}


def _entry(family: str, label: str, seed: int = 0, **params: Any) -> ReferenceSolution:
    name = "-".join(part for part in (family, label, f"s{seed}" if seed else "") if part)
    return ReferenceSolution(name, family, params, seed)


@dataclass(frozen=True)
class DataProfile:
    """What the grid needs to know of the prepared data to keep every fit to seconds."""

    columns: int  # of train.csv
    classes: int  # distinct targets (0 for regression)
    wide: bool  # an image task with many pixel columns (mnist-5k's 784)


def data_profile(task: Task) -> DataProfile:
    from mleforge.tasks.preparation import require_prepared

    require_prepared(task)
    path = task.public_dir / "train.csv"
    columns = len(pd.read_csv(path, nrows=0).columns)
    classes = 0
    if task.spec.problem != "regression":
        classes = int(pd.read_csv(path, usecols=[task.spec.target])[task.spec.target].nunique())
    return DataProfile(columns, classes, task.spec.modality == "image" and columns > WIDE_COLUMNS)


def _classifiers(task: Task, data: DataProfile) -> list[ReferenceSolution]:
    metric = get_metric(task.spec.metric or "")
    pca = {"pca": WIDE_PCA} if data.wide else {}
    constant = [_entry("constant", "prior", strategy="prior")]
    if metric.name == "log_loss":
        constant.append(_entry("constant", "uniform", strategy="uniform"))
    else:  # a seeded random guess at the class frequencies: the chance floor
        constant.append(_entry("constant", "stratified", strategy="stratified"))
    if task.spec.modality == "text":
        bayes = [_entry("multinomial_nb", f"a{a}", alpha=a) for a in (0.1, 1.0)]
    else:
        bayes = [_entry("gaussian_nb", "", **pca)]
    return [
        *constant,
        *(_entry("linear", f"C{c}", C=c) for c in (0.01, 0.1, 1.0, 10.0)),
        *bayes,
        *(_entry("knn", f"k{k}", n_neighbors=k, **pca) for k in (1, 5, 15, 50)),
        _entry("knn", "k15-distance", n_neighbors=15, weights="distance", **pca),
        *(_entry("tree", f"d{d}", max_depth=d) for d in (2, 4, 8)),
        _entry("tree", "full", max_depth=None),
        _entry("tree", "d6-leaf20", max_depth=6, min_samples_leaf=20),
        *_forests(),
        *_boosting(data, pca),
        *_networks(task, pca),
    ]


def _regressors(task: Task, data: DataProfile) -> list[ReferenceSolution]:
    pca = {"pca": WIDE_PCA} if data.wide else {}
    entries = [
        _entry("constant", "mean", strategy="mean"),
        _entry("constant", "median", strategy="median"),
        *(_entry("linear", f"alpha{a}", alpha=a) for a in (0.1, 1.0, 10.0, 100.0)),
        *(_entry("knn", f"k{k}", n_neighbors=k, **pca) for k in (3, 10, 30)),
        _entry("knn", "k10-distance", n_neighbors=10, weights="distance", **pca),
        *(_entry("tree", f"d{d}", max_depth=d) for d in (2, 4, 8)),
        _entry("tree", "full", max_depth=None),
        _entry("tree", "d8-leaf20", max_depth=8, min_samples_leaf=20),
        *_forests(),
        *_boosting(data, pca),
        *_networks(task, {**pca, "scale_target": True}),
    ]
    if task.spec.metric == "rmsle":  # what RMSLE rewards: fitting the log of the target
        entries += [
            _entry("linear", "alpha10-log", alpha=10.0, log_target=True),
            _entry("random_forest", "n100-log", n_estimators=100, log_target=True),
            _entry("hist_gb", "tuned-log", log_target=True, **_TUNED_GB),
            _entry("mlp", "h100-log", hidden_layer_sizes=(100,), log_target=True, scale_target=True),
        ]
    return entries


def _ordinal_regressors() -> list[ReferenceSolution]:
    """Regressors whose predictions are rounded to the nearest label (for QWK)."""
    return [
        _entry("constant", "mean-regress", strategy="mean", regress=True),
        *(_entry("linear", f"alpha{a}-regress", alpha=a, regress=True) for a in (1.0, 100.0)),
        _entry("knn", "k30-regress", n_neighbors=30, regress=True),
        _entry("random_forest", "n100-d8-regress", n_estimators=100, max_depth=8, regress=True),
        _entry("hist_gb", "lr0.1-it100-regress", learning_rate=0.1, max_iter=100, regress=True),
        _entry("hist_gb", "tuned-regress", regress=True, **_TUNED_GB),
    ]


def _forests() -> list[ReferenceSolution]:
    return [
        *(_entry("random_forest", "n100", seed, n_estimators=100) for seed in (0, 1, 2)),
        _entry("random_forest", "n50-d6", n_estimators=50, max_depth=6),
        _entry("random_forest", "n100-leaf3", n_estimators=100, min_samples_leaf=3),
        *(_entry("extra_trees", "n100", seed, n_estimators=100) for seed in (0, 1)),
        _entry("extra_trees", "n100-d10", n_estimators=100, max_depth=10),
    ]


def _boosting(data: DataProfile, pca: dict[str, Any]) -> list[ReferenceSolution]:
    if data.classes >= MANY_CLASSES:
        rates = ((0.1, 30), (0.3, 30), (0.1, 60))
        tuned = _TUNED_GB_MANY
    else:
        rates = ((0.03, 100), (0.1, 100), (0.3, 50), (0.1, 300))
        tuned = _TUNED_GB
    return [
        *(_entry("hist_gb", f"lr{lr}-it{it}", learning_rate=lr, max_iter=it, **pca) for lr, it in rates),
        _entry("hist_gb", "tuned", **tuned, **pca),
    ]


def _networks(task: Task, extra: dict[str, Any]) -> list[ReferenceSolution]:
    # A TF-IDF vocabulary of 5,000 makes a slow first layer; 1,000 words keep most of the signal.
    text = {"text_max_features": 1000} if task.spec.modality == "text" else {}
    return [_entry("mlp", "h100", seed, hidden_layer_sizes=(100,), **text, **extra) for seed in (0, 1)]


def solution_grid(task: Task) -> list[ReferenceSolution]:
    """The reference solutions for a task, chosen by its problem and metric (25-40 entries).

    Reads the prepared train.csv's header and target to size the grid (`data_profile`).
    """
    problem = task.spec.problem
    data = data_profile(task)
    if problem == "regression":
        return _regressors(task, data)
    if problem == "ordinal":
        return [*_classifiers(task, data), *_ordinal_regressors()]
    if problem in ("binary", "multiclass"):
        return _classifiers(task, data)
    raise ConfigError(f"no reference grid for problem {problem!r} of task {task.id}")


def pick_solution(task: Task, name: str | None = None) -> ReferenceSolution:
    """The named entry of the task's grid, or by default the best entry on its leaderboard."""
    grid = {s.name: s for s in solution_grid(task)}
    if name is None:
        board = task.leaderboard()
        if "entry" not in board.columns:
            raise ConfigError(f"the leaderboard of {task.id} has no `entry` column; name a --solution")
        name = str(board["entry"].iloc[0])
    if name not in grid:
        raise ConfigError(f"task {task.id} has no reference solution {name!r}; known: {', '.join(grid)}")
    return grid[name]
