"""Turn a submission file into a `GradeReport`, in the parent process, never in the sandbox."""

from __future__ import annotations

import threading
from datetime import datetime
from pathlib import Path

import numpy as np
import pandas as pd

from mleforge.errors import GraderError, InvalidSubmission
from mleforge.grading.medals import rank_score
from mleforge.grading.metrics import get_metric
from mleforge.grading.report import GradeReport
from mleforge.grading.submission import (
    SubmissionBounds,
    check_columns,
    prepare_for_metric,
    read_submission,
)
from mleforge.tasks.preparation import require_prepared
from mleforge.tasks.task import Task

# MLE-bench rounds every score to 5 decimals before ranking it.
SCORE_DECIMALS = 5

_answers_cache: dict[tuple[str, int, int], pd.DataFrame] = {}
_anchor_cache: dict[tuple[str, int, int], float | None] = {}
_cache_lock = threading.Lock()


def _file_key(path: Path) -> tuple[str, int, int]:
    stat = path.stat()
    return (str(path), stat.st_mtime_ns, stat.st_size)


def load_answers(task: Task) -> pd.DataFrame:
    key = _file_key(task.answers_path)
    with _cache_lock:
        cached = _answers_cache.get(key)
    if cached is None:
        cached = pd.read_csv(task.answers_path)
        with _cache_lock:
            _answers_cache[key] = cached
    return cached


def submission_bounds(task: Task) -> SubmissionBounds:
    """What a submission of `task` may be before it is parsed: its size relative to the
    answers file, its header, its number of lines (MLE-bench's grade functions decide
    rows themselves: no line bound there)."""
    rows = None if task.kind == "mlebench" else len(load_answers(task))
    return SubmissionBounds.for_answers(task.answers_path, task.spec.submission.columns, rows)


def score_frame(task: Task, submission: pd.DataFrame) -> float:
    """The raw metric value of a submission frame, or InvalidSubmission.

    A named metric validates the frame precisely first. A task's own grade function
    (MLE-bench's) gets the header checked against the sample submission, then runs:
    its `InvalidSubmissionError` (MLE-bench's name) becomes InvalidSubmission, and
    any other exception is a grader bug, raised as GraderError, not an invalid run.
    """
    answers = load_answers(task)
    fmt = task.spec.submission
    grade_fn = task.grade_callable
    if grade_fn is None:
        metric = get_metric(task.spec.metric or "")
        y_true, y_pred = prepare_for_metric(submission, answers, fmt.id_column, fmt.target_columns, metric)
        score = metric(y_true, y_pred)
    else:
        check_columns(submission, fmt.columns)
        if len(submission) != len(answers) and task.kind != "mlebench":
            raise InvalidSubmission(f"the submission has {len(submission)} rows; expected {len(answers)}")
        try:
            score = grade_fn(submission, answers.copy())
        except InvalidSubmission:
            raise
        except Exception as exc:
            if type(exc).__name__ == "InvalidSubmissionError":
                raise InvalidSubmission(str(exc)) from None
            raise GraderError(
                f"the grade function of {task.id} ({task.spec.grade_fn}) failed: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
    if score is None or not np.isfinite(float(score)):
        raise GraderError(f"the grade function of {task.id} returned {score!r}, not a finite number")
    return round(float(score), SCORE_DECIMALS)


def sample_submission_score(task: Task) -> float | None:
    """The score of the task's sample submission (the naive baseline), or None if it is
    not a valid submission. Cached per sample file."""
    key = _file_key(task.sample_submission_path)
    with _cache_lock:
        if key in _anchor_cache:
            return _anchor_cache[key]
    try:
        anchor = score_frame(task, read_submission(task.sample_submission_path, submission_bounds(task)))
    except InvalidSubmission:
        anchor = None
    with _cache_lock:
        _anchor_cache[key] = anchor
    return anchor


def _normalized(task: Task, score: float | None, leaderboard: pd.Series) -> float | None:
    """0 at the sample submission's score, 1 at the leaderboard's best; None when invalid."""
    if score is None:
        return None
    anchor = sample_submission_score(task)
    best = float(leaderboard.min() if task.is_lower_better else leaderboard.max())
    if anchor is None:  # fall back to the leaderboard's worst entry
        anchor = float(leaderboard.max() if task.is_lower_better else leaderboard.min())
    if best == anchor:
        return None
    return float((score - anchor) / (best - anchor))


def grade(task: Task, submission_path: str | Path) -> GradeReport:
    """Grade a submission file: invalid submissions get a report with their reason."""
    require_prepared(task)
    path = Path(submission_path)
    scores = task.leaderboard()["score"]
    exists = path.is_file() and path.suffix.lower() == ".csv"
    score: float | None = None
    reason: str | None = None
    try:
        score = score_frame(task, read_submission(path, submission_bounds(task)))
    except InvalidSubmission as exc:
        reason = exc.reason
    rank = rank_score(score, scores.to_numpy(dtype=float), task.is_lower_better)
    return GradeReport(
        competition_id=task.id,
        score=score,
        gold_threshold=rank.gold_threshold,
        silver_threshold=rank.silver_threshold,
        bronze_threshold=rank.bronze_threshold,
        median_threshold=rank.median_threshold,
        any_medal=rank.any_medal,
        gold_medal=rank.gold_medal,
        silver_medal=rank.silver_medal,
        bronze_medal=rank.bronze_medal,
        above_median=rank.above_median,
        submission_exists=exists,
        valid_submission=score is not None,
        is_lower_better=task.is_lower_better,
        created_at=datetime.now(),
        submission_path=str(path),
        metric=task.spec.metric_name,
        normalized_score=_normalized(task, score, scores),
        invalid_reason=reason,
    )

