"""The named metrics a `task.yaml` may give, and which way each is better.

A task names its metric (or brings its own grade function); what a name means when a
submission is scored lives in `mleforge.grading.metrics`, which builds each metric on the
direction given here, so a task spec is checked without loading the scoring code.
"""

from __future__ import annotations

import re

# name -> the direction in which the metric is better
METRIC_DIRECTIONS: dict[str, str] = {
    "accuracy": "higher",
    "macro_f1": "higher",
    "qwk": "higher",
    "roc_auc": "higher",
    "log_loss": "lower",
    "rmse": "lower",
    "mae": "lower",
    "rmsle": "lower",
}
MAP_DIRECTION = "higher"  # map@K, for any K >= 1
_MAP_RE = re.compile(r"^map@([1-9][0-9]*)$")

METRIC_NAMES_HELP = f"one of {', '.join(sorted(METRIC_DIRECTIONS))} or map@K (e.g. map@3)"


def map_k(name: str) -> int | None:
    """K of a `map@K` name; None for any other name."""
    match = _MAP_RE.match(name)
    return int(match.group(1)) if match else None


def metric_direction(name: str) -> str:
    """"higher" or "lower": which way the named metric is better. Raises KeyError for unknown names."""
    if name in METRIC_DIRECTIONS:
        return METRIC_DIRECTIONS[name]
    if map_k(name) is not None:
        return MAP_DIRECTION
    raise KeyError(name)


def metric_names() -> list[str]:
    return [*sorted(METRIC_DIRECTIONS), "map@K"]
