"""The task's metric, written inline in a script: one standalone `score(y_true, y_pred)` per
named metric, and a standard proxy for a task graded by its own function.
"""

from __future__ import annotations

from mleforge.expert.profile import TaskProfile

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


def metric_section(profile: TaskProfile) -> tuple[str, str]:
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
