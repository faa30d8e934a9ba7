"""Kaggle's public/private split of a task's test answers.

A Kaggle competition shows every submission's score on a public part of the test set
(about 30%) and ranks the final submissions on the rest, the private part, which nobody
sees before the end. mleforge does the same: everything the agent and its search see,
and the reward during training, is graded on the public part; the final report, medals
and the normalized score on the private part.

The split is a pure function of the answers and the task id: the rows are ordered by a
hash of (task id, row id), so the same answers always split the same way, on any machine
and in any row order. For classification it is stratified: each class puts
`round(fraction * its rows)` of its rows in the public part (at least one of a class of
two or more, never all of them), so both parts hold every class the answers hold where
that is possible.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np
import pandas as pd

from mleforge.errors import PreparationError

PUBLIC_FRACTION = 0.3
CLASSIFICATION = ("binary", "multiclass", "ordinal")
PARTS = ("private", "public", "full")
# What an agent is shown of its own submissions during a run: their public score (Kaggle's
# public leaderboard), or nothing beyond the execution output (MLE-bench's own protocol).
FEEDBACK_MODES = ("public", "none")


def check_feedback(feedback: str) -> str:
    if feedback not in FEEDBACK_MODES:
        from mleforge.errors import ConfigError

        raise ConfigError(f"feedback must be one of {', '.join(FEEDBACK_MODES)}; got {feedback!r}")
    return feedback


def _row_keys(task_id: str, ids: pd.Series) -> np.ndarray:
    """A sort key per row: the first 8 bytes of sha256(task id, row id), as an integer."""
    return np.array(
        [int.from_bytes(hashlib.sha256(f"{task_id}\0{i}".encode()).digest()[:8], "big") for i in ids.astype(str)],
        dtype=np.uint64,
    )


def _classes(answers: pd.DataFrame, targets: Sequence[str]) -> pd.Series:
    """Each row's class: the label of one target column, the column of the largest value of
    several (one-hot or probability answers)."""
    if len(targets) == 1:
        return answers[targets[0]].astype(str)
    return answers[list(targets)].astype(float).idxmax(axis=1).astype(str)


def public_count(n: int, fraction: float) -> int:
    """How many of `n` rows of one stratum go public: round(fraction * n), at least one and
    at most n - 1 when n >= 2 (both parts then see the stratum); 0 for one row."""
    if n < 2:
        return 0
    return min(n - 1, max(1, int(round(fraction * n))))


def public_mask(
    answers: pd.DataFrame,
    id_column: str,
    targets: Sequence[str],
    problem: str,
    task_id: str,
    fraction: float = PUBLIC_FRACTION,
) -> np.ndarray:
    """A boolean array over the answers' rows: True for the public part."""
    if not 0.0 < fraction < 1.0:
        raise PreparationError(f"the public fraction must be in (0, 1); got {fraction}")
    if len(answers) < 2:
        raise PreparationError(
            f"task {task_id} has {len(answers)} test row(s); a public/private split needs at least 2"
        )
    if id_column not in answers.columns:
        raise PreparationError(f"the answers of task {task_id} have no id column {id_column!r}")
    keys = _row_keys(task_id, answers[id_column])
    if problem in CLASSIFICATION:
        strata = _classes(answers, targets).to_numpy()
    else:
        strata = np.zeros(len(answers), dtype=int)
    mask = np.zeros(len(answers), dtype=bool)
    for stratum in pd.unique(strata):
        rows = np.flatnonzero(strata == stratum)
        order = rows[np.argsort(keys[rows], kind="stable")]
        mask[order[: public_count(len(rows), fraction)]] = True
    if not mask.any():  # every class a single row: take the first rows by key overall
        mask[np.argsort(keys, kind="stable")[: public_count(len(answers), fraction)]] = True
    return mask


def split_answers(
    answers: pd.DataFrame,
    id_column: str,
    targets: Sequence[str],
    problem: str,
    task_id: str,
    fraction: float = PUBLIC_FRACTION,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(public, private) answers, each in the answers' own row order."""
    mask = public_mask(answers, id_column, targets, problem, task_id, fraction)
    return answers[mask].reset_index(drop=True), answers[~mask].reset_index(drop=True)
