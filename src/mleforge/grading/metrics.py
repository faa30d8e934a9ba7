"""Named metrics, computed as MLE-bench's competition graders compute them.

Each metric calls what the graders of MLE-bench's competitions call (scikit-learn's
`accuracy_score`, `f1_score(average="macro")`, `roc_auc_score`, `log_loss`,
`cohen_kappa_score(weights="quadratic")`, `root_mean_squared_error`,
`mean_absolute_error`, `root_mean_squared_log_error`, and MLE-bench's own
`mean_average_precision_at_k`), so a score matches theirs to the last bit, and it
returns that function's own value, whose type decides how it rounds
(`mleforge.grading.grader.mlebench_round`).

The inputs are the aligned answers and predictions, already validated by
`mleforge.grading.submission`:

    label (accuracy, macro_f1, qwk):     y_true (n,), y_pred (n,)
    probability (roc_auc, log_loss):     y_true (n,) in {0,1}, y_pred (n,) in [0,1], or
                                         y_true (n, K) 0/1 columns, y_pred (n, K) in [0,1]
    number (rmse, mae, rmsle):           y_true (n,), y_pred (n,)
    ranking (map@k):                     y_true n sets of labels, y_pred n lists of labels

Two column layouts of `probability`: multiclass log loss (one-hot answers, each row of
the submission a distribution, checked to sum to 1 as MLE-bench's graders check) and
column-wise ROC AUC (the mean of one AUC per column, as jigsaw's grader computes it).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from mleforge.tasks.metric_names import map_k, metric_direction

# MLE-bench's multiclass log-loss graders (leaf, spooky, dog-breed) refuse a row unless
# `np.isclose(row_sum, 1, atol=1e-6)`: with numpy's default rtol=1e-5 that is |sum - 1| <= 1.1e-5.
ROW_SUM_ATOL = 1e-6


@dataclass(frozen=True)
class Metric:
    name: str
    direction: str  # "higher" or "lower" is better
    kind: str  # label | probability | number | ranking
    fn: Callable[[Any, Any], Any]
    best: float  # the value a perfect submission scores
    k: int | None = None  # for map@k

    @property
    def is_lower_better(self) -> bool:
        return self.direction == "lower"

    def __call__(self, y_true: Any, y_pred: Any) -> Any:
        """The metric's value as the underlying function returns it (a float or np.float64)."""
        return self.fn(y_true, y_pred)


def accuracy(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    from sklearn.metrics import accuracy_score

    return accuracy_score(y_true, y_pred)


def macro_f1(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    """Unweighted mean of per-class F1 over the labels in the answers or the predictions."""
    from sklearn.metrics import f1_score

    return f1_score(y_true, y_pred, average="macro")


def roc_auc(y_true: np.ndarray, y_score: np.ndarray) -> float:
    """Binary ROC AUC; with (n, K) arrays the mean of the K column AUCs ("macro")."""
    from sklearn.metrics import roc_auc_score

    return roc_auc_score(y_true, y_score, average="macro")


def log_loss(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    """scikit-learn's log loss: probabilities clipped to [eps, 1 - eps] with eps the float64
    machine epsilon (2.2e-16), rows never rescaled (the submission check refuses rows that
    do not sum to 1). Binary: y_pred is P(class 1)."""
    from sklearn.metrics import log_loss as sk_log_loss

    return sk_log_loss(y_true, y_pred)


def rmse(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    from sklearn.metrics import root_mean_squared_error

    return root_mean_squared_error(y_true, y_pred)


def mae(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    from sklearn.metrics import mean_absolute_error

    return mean_absolute_error(y_true, y_pred)


def rmsle(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    """Root mean squared error of log(1 + x); predictions must be > -1 (validated before),
    where log1p is defined, as scikit-learn and so MLE-bench's graders take them."""
    from sklearn.metrics import root_mean_squared_log_error

    return root_mean_squared_log_error(y_true, y_pred)


def quadratic_weighted_kappa(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    """Cohen's kappa with quadratic weights, as `cohen_kappa_score(y_pred, y_true,
    weights="quadratic")` (APTOS, essay scoring): the weight of a cell is the squared
    distance between the POSITIONS of its two labels among the sorted labels present, not
    between the label values. nan when only one label occurs at all."""
    from sklearn.metrics import cohen_kappa_score

    return cohen_kappa_score(y_pred, y_true, weights="quadratic")


def average_precision_at_k(actual: set, predicted: Sequence[Any], k: int) -> float:
    """MLE-bench's AP@k: the predictions are cut to the first k; a correct label counts at
    its first rank only, but a repeated label still takes a rank.

        AP@k = sum over ranks i <= k holding a new correct label of (hits so far / i),
               divided by min(|actual|, k)   (0 when `actual` is empty)
    """
    predicted = list(predicted)[:k]
    score, hits = 0.0, 0.0
    for i, p in enumerate(predicted):
        if p in actual and p not in predicted[:i]:
            hits += 1.0
            score += hits / (i + 1.0)
    if not actual:
        return 0.0
    return score / min(len(actual), k)


def mean_average_precision_at_k(actual: Sequence[set], predicted: Sequence[Sequence[Any]], k: int) -> np.float64:
    """The mean of `average_precision_at_k` over rows (a numpy float, as MLE-bench returns it).

    numpy's mean sums pairwise, so the rows' order can change the last bits and, rarely,
    the 5th decimal once rounded: MLE-bench's MAP@k graders sort the rows by id first, and
    so does `mleforge.grading.grader` before calling this."""
    return np.mean([average_precision_at_k(a, p, k) for a, p in zip(actual, predicted)])


def undefined_reason(metric: Metric, y_true: Any, y_pred: Any) -> str:
    """Why `metric` came out nan on these inputs (MLE-bench reports such a score as nan)."""
    if metric.name == "qwk":
        labels = np.unique(np.concatenate([np.asarray(y_true), np.asarray(y_pred)]))
        shown = [f"{v:g}" if isinstance(v, (float, np.floating)) else str(v) for v in labels[:3]]
        return (f"quadratic weighted kappa is undefined when the answers and the predictions hold "
                f"a single label between them (here {', '.join(shown)}); "
                "MLE-bench would report a nan score")
    if metric.name == "roc_auc":
        return ("ROC AUC is undefined when a column of the answers holds one class only; "
                "MLE-bench would report a nan score")
    return f"{metric.name} is undefined (nan) for these answers and predictions"


def _named(name: str, kind: str, fn: Callable[[Any, Any], Any], best: float) -> Metric:
    return Metric(name, metric_direction(name), kind, fn, best)


_STATIC: dict[str, Metric] = {
    m.name: m
    for m in (
        _named("accuracy", "label", accuracy, 1.0),
        _named("macro_f1", "label", macro_f1, 1.0),
        _named("qwk", "label", quadratic_weighted_kappa, 1.0),
        _named("roc_auc", "probability", roc_auc, 1.0),
        _named("log_loss", "probability", log_loss, 0.0),
        _named("rmse", "number", rmse, 0.0),
        _named("mae", "number", mae, 0.0),
        _named("rmsle", "number", rmsle, 0.0),
    )
}


def get_metric(name: str) -> Metric:
    """Look a metric up by name; `map@K` for any K >= 1. Raises KeyError for unknown names."""
    if name in _STATIC:
        return _STATIC[name]
    k = map_k(name)
    if k is not None:
        return Metric(
            name, metric_direction(name), "ranking", lambda t, p: mean_average_precision_at_k(t, p, k), 1.0, k=k
        )
    raise KeyError(name)
