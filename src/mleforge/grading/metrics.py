"""Metric functions with their direction.

Each metric takes the aligned answers and predictions (already validated by
`mleforge.grading.submission`) as numpy arrays:

    labels  (accuracy, macro_f1, qwk):  y_true (n,), y_pred (n,)
    probability (roc_auc, binary log_loss): y_true (n,) in {0,1}, y_pred (n,) in [0,1]
    class_probabilities (multiclass log_loss): y_true (n, K) one-hot, y_pred (n, K) in [0,1]
    number (rmse, mae, rmsle): y_true (n,), y_pred (n,)
    ranking (map@k): y_true (n,) labels, y_pred list of n label lists
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

# Kaggle and scikit-learn clip probabilities to keep log loss finite.
LOG_LOSS_EPS = 1e-15


@dataclass(frozen=True)
class Metric:
    name: str
    direction: str  # "higher" or "lower" is better
    kind: str  # label | probability | class_probabilities | number | ranking
    fn: Callable[[Any, Any], float]
    best: float  # the value a perfect submission scores
    k: int | None = None  # for map@k

    @property
    def is_lower_better(self) -> bool:
        return self.direction == "lower"

    def __call__(self, y_true: Any, y_pred: Any) -> float:
        return float(self.fn(y_true, y_pred))


def accuracy(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    return float(np.mean(np.asarray(y_true) == np.asarray(y_pred)))


def macro_f1(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    """Unweighted mean of per-class F1 over the classes present in the answers or predictions."""
    y_true, y_pred = np.asarray(y_true), np.asarray(y_pred)
    scores = []
    for label in np.unique(np.concatenate([y_true, y_pred])):
        tp = np.sum((y_true == label) & (y_pred == label))
        fp = np.sum((y_true != label) & (y_pred == label))
        fn = np.sum((y_true == label) & (y_pred != label))
        denom = 2 * tp + fp + fn
        scores.append(0.0 if denom == 0 else 2 * tp / denom)
    return float(np.mean(scores))


def roc_auc(y_true: np.ndarray, y_score: np.ndarray) -> float:
    """Area under the ROC curve: the probability that a random positive outranks a random
    negative, ties counting one half (Mann-Whitney U with average ranks)."""
    from scipy.stats import rankdata

    y_true = np.asarray(y_true).astype(int)
    n_pos = int(y_true.sum())
    n_neg = len(y_true) - n_pos
    if n_pos == 0 or n_neg == 0:
        raise ValueError("ROC AUC needs both classes in the answers")
    ranks = rankdata(np.asarray(y_score, dtype=float))
    return float((ranks[y_true == 1].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def log_loss(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    """Mean negative log-likelihood. Binary: y_pred is P(class 1). Multiclass: each row of
    y_pred is rescaled to sum to 1 (Kaggle's rule), then clipped to [eps, 1 - eps]."""
    y_true = np.asarray(y_true, dtype=float)
    y_pred = np.asarray(y_pred, dtype=float)
    if y_pred.ndim == 1:
        p = np.clip(y_pred, LOG_LOSS_EPS, 1 - LOG_LOSS_EPS)
        return float(-np.mean(y_true * np.log(p) + (1 - y_true) * np.log(1 - p)))
    sums = y_pred.sum(axis=1, keepdims=True)
    k = y_pred.shape[1]
    # A row of all zeros carries no information: treat it as uniform.
    p = np.where(sums > 0, y_pred / np.where(sums > 0, sums, 1.0), 1.0 / k)
    p = np.clip(p, LOG_LOSS_EPS, 1 - LOG_LOSS_EPS)
    return float(-np.mean(np.sum(y_true * np.log(p), axis=1)))


def rmse(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    diff = np.asarray(y_true, dtype=float) - np.asarray(y_pred, dtype=float)
    return float(np.sqrt(np.mean(diff**2)))


def mae(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    return float(np.mean(np.abs(np.asarray(y_true, dtype=float) - np.asarray(y_pred, dtype=float))))


def rmsle(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    """Root mean squared error of log(1 + x); predictions must be >= 0 (validated before)."""
    return rmse(np.log1p(np.asarray(y_true, dtype=float)), np.log1p(np.asarray(y_pred, dtype=float)))


def quadratic_weighted_kappa(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    """Cohen's kappa with quadratic weights over the integer labels seen in either array.

    kappa = 1 - sum(W * O) / sum(W * E), W[i, j] = (i - j)^2 / (K - 1)^2, O the observed
    confusion matrix, E the outer product of the marginals scaled to the same total.
    """
    y_true = np.asarray(y_true).astype(int)
    y_pred = np.asarray(y_pred).astype(int)
    lo = min(y_true.min(), y_pred.min())
    hi = max(y_true.max(), y_pred.max())
    k = hi - lo + 1
    if k == 1:
        return 1.0
    observed = np.zeros((k, k))
    np.add.at(observed, (y_true - lo, y_pred - lo), 1)
    expected = np.outer(observed.sum(axis=1), observed.sum(axis=0)) / observed.sum()
    idx = np.arange(k)
    weights = (idx[:, None] - idx[None, :]) ** 2 / (k - 1) ** 2
    denom = np.sum(weights * expected)
    if denom == 0:
        return 1.0 if np.sum(weights * observed) == 0 else 0.0
    return float(1 - np.sum(weights * observed) / denom)


def mean_average_precision_at_k(
    y_true: Sequence[Any], y_pred: Sequence[Sequence[Any]], k: int
) -> float:
    """MAP@k with one relevant label per row: 1/rank of the first correct label within the
    first k predictions (duplicates after the first occurrence ignored), else 0."""
    total = 0.0
    for truth, preds in zip(y_true, y_pred):
        seen: list[Any] = []
        for p in preds:
            if p not in seen:
                seen.append(p)
        seen = seen[:k]
        if truth in seen:
            total += 1.0 / (seen.index(truth) + 1)
    return total / len(y_true)


_STATIC: dict[str, Metric] = {
    m.name: m
    for m in (
        Metric("accuracy", "higher", "label", accuracy, 1.0),
        Metric("macro_f1", "higher", "label", macro_f1, 1.0),
        Metric("qwk", "higher", "label", quadratic_weighted_kappa, 1.0),
        Metric("roc_auc", "higher", "probability", roc_auc, 1.0),
        Metric("log_loss", "lower", "probability", log_loss, 0.0),
        Metric("rmse", "lower", "number", rmse, 0.0),
        Metric("mae", "lower", "number", mae, 0.0),
        Metric("rmsle", "lower", "number", rmsle, 0.0),
    )
}
_MAP_RE = re.compile(r"^map@([1-9][0-9]*)$")

METRIC_NAMES_HELP = f"one of {', '.join(sorted(_STATIC))} or map@K (e.g. map@3)"


def get_metric(name: str) -> Metric:
    """Look a metric up by name; `map@K` for any K >= 1. Raises KeyError for unknown names."""
    if name in _STATIC:
        return _STATIC[name]
    match = _MAP_RE.match(name)
    if match:
        k = int(match.group(1))
        return Metric(
            name, "higher", "ranking", lambda t, p: mean_average_precision_at_k(t, p, k), 1.0, k=k
        )
    raise KeyError(name)


def metric_names() -> list[str]:
    return [*sorted(_STATIC), "map@K"]
