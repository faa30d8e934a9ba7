"""Turn a submission file into a `GradeReport`, in the parent process, never in the sandbox.

Two paths, one report:

- a built-in or folder task: a named metric validates the frame precisely (every invalid
  submission gets a reason that names the problem), or the task's own grade function runs
  after its header is checked; a bug in that function is a `GraderError`, never a score;
- an `mlebench:` competition: graded field for field as `mlebench.grade.grade_csv` grades
  it. The submission (extra columns and all) goes to the competition's grade function
  with the answers (`.csv` or `.jsonl`); its `InvalidSubmissionError`, or any other
  exception, makes the submission invalid (MLE-bench's `Grader.__call__` returns None for
  both), with the exception as the reason; a nan score stays a valid nan, as in MLE-bench.

Every score is rounded as MLE-bench rounds it: `round(score, 5)` on the value the grade
function returned, so an `np.float64` rounds by numpy's rule (0.934375 -> 0.93438) and a
Python float by Python's (0.934375 -> 0.93437).
"""

from __future__ import annotations

import copy
import json
import math
import threading
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from mleforge.errors import GraderError, InvalidSubmission, TaskSpecError
from mleforge.grading.medals import rank_score
from mleforge.grading.metrics import get_metric, undefined_reason
from mleforge.grading.report import GradeReport
from mleforge.grading.submission import (
    SubmissionBounds,
    check_columns,
    prepare_for_metric,
    read_csv_like_mlebench,
    read_submission,
)
from mleforge.tasks.preparation import require_prepared
from mleforge.tasks.task import Task

# MLE-bench rounds every score to 5 decimals before ranking it.
SCORE_DECIMALS = 5
# Normalized scores are ratios of 5-decimal scores: 6 decimals keep them exact enough to
# compare and free of float noise such as 0.5801350000000001.
NORMALIZED_DECIMALS = 6

_answers_cache: dict[tuple[str, int, int], Any] = {}
_anchor_cache: dict[tuple[str, int, int], float | None] = {}
_cache_lock = threading.Lock()


def _file_key(path: Path) -> tuple[str, int, int]:
    stat = path.stat()
    return (str(path), stat.st_mtime_ns, stat.st_size)


def mlebench_round(score: Any) -> Any:
    """MLE-bench's `round(score, 5)`, on the grade function's own return type."""
    return round(score, SCORE_DECIMALS)


def clean_float(value: Any) -> float:
    """A Python float with no negative zero (-0.0 prints as a sign the score does not have)."""
    return float(value) + 0.0


def read_answers(path: Path) -> Any:
    """MLE-bench's `load_answers`: a `.csv` as a frame (round-trip floats), a `.jsonl` as a
    list of dicts; any other suffix is a task definition error."""
    if path.suffix == ".csv":
        return read_csv_like_mlebench(path)
    if path.suffix == ".jsonl":
        with open(path, encoding="utf-8") as handle:
            return [json.loads(line) for line in handle]
    raise TaskSpecError(path, None, "answers must be a .csv or .jsonl file (as MLE-bench reads them)")


def load_answers(task: Task) -> Any:
    """The task's answers, read once per file version; callers get their own copy."""
    key = _file_key(task.answers_path)
    with _cache_lock:
        cached = _answers_cache.get(key)
    if cached is None:
        cached = read_answers(task.answers_path)
        with _cache_lock:
            _answers_cache[key] = cached
    return cached.copy() if isinstance(cached, pd.DataFrame) else copy.deepcopy(cached)


def submission_bounds(task: Task) -> SubmissionBounds:
    """What a submission of `task` may be before it is parsed: its size relative to the
    answers file, its header, its number of lines (MLE-bench's grade functions decide
    rows themselves: no line bound there)."""
    if task.kind == "mlebench":
        # MLE-bench's grader decides columns (extra ones reach it) and rows itself: size only.
        return SubmissionBounds.for_answers(task.answers_path, None, None)
    return SubmissionBounds.for_answers(task.answers_path, task.spec.submission.columns, len(load_answers(task)))


def score_frame(task: Task, submission: pd.DataFrame) -> float:
    """The rounded metric value of a submission frame, or InvalidSubmission.

    For `mlebench:` tasks the value may be nan (MLE-bench's valid nan score).
    """
    if task.kind == "mlebench":
        return _score_mlebench(task, submission)
    answers = load_answers(task)
    fmt = task.spec.submission
    grade_fn = task.grade_callable
    if grade_fn is None:
        metric = get_metric(task.spec.metric or "")
        y_true, y_pred = prepare_for_metric(submission, answers, fmt.id_column, fmt.target_columns, metric)
        try:
            score = metric(y_true, y_pred)
        except ValueError as exc:
            # The submission passed every check: what is left is the answers' problem.
            raise GraderError(f"metric {metric.name} cannot score task {task.id}: {exc}") from exc
        if _is_nan(score):
            raise InvalidSubmission(undefined_reason(metric, y_true, y_pred))
    else:
        check_columns(submission, fmt.columns)
        if len(submission) != len(answers):
            raise InvalidSubmission(f"the submission has {len(submission)} rows; expected {len(answers)}")
        try:
            score = grade_fn(submission, answers)
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
    return clean_float(mlebench_round(score))


def _score_mlebench(task: Task, submission: pd.DataFrame) -> float:
    """`mlebench.grade_helpers.Grader.__call__`: every exception of the grade function makes
    the submission invalid; the score is rounded; nan stays nan."""
    answers = load_answers(task)
    grade_fn = task.grade_callable
    try:
        score = grade_fn(submission, answers)
    except Exception as exc:
        if type(exc).__name__ == "InvalidSubmissionError":
            raise InvalidSubmission(str(exc)) from None
        raise InvalidSubmission(
            f"the competition's grade function raised {type(exc).__name__}: {exc} "
            "(MLE-bench counts this as an invalid submission)"
        ) from None
    if score is None:
        raise GraderError(f"the grade function of {task.id} returned None, not a score")
    return clean_float(mlebench_round(score))


def _is_nan(value: Any) -> bool:
    try:
        return math.isnan(value)
    except TypeError:
        return False


def sample_submission_score(task: Task) -> float | None:
    """The score of the task's sample submission (the naive baseline), or None if it is
    not a valid submission (or scores nan). Cached per sample file."""
    key = _file_key(task.sample_submission_path)
    with _cache_lock:
        if key in _anchor_cache:
            return _anchor_cache[key]
    try:
        anchor: float | None = score_frame(task, read_submission(task.sample_submission_path,
                                                                 submission_bounds(task)))
    except InvalidSubmission:
        anchor = None
    if anchor is not None and math.isnan(anchor):
        anchor = None
    with _cache_lock:
        _anchor_cache[key] = anchor
    return anchor


def _normalized(task: Task, score: float | None, leaderboard: pd.Series) -> float | None:
    """0 at the sample submission's score, 1 at the leaderboard's best; None when invalid."""
    if score is None or math.isnan(score):
        return None
    anchor = sample_submission_score(task)
    best = float(leaderboard.min() if task.is_lower_better else leaderboard.max())
    if anchor is None:  # fall back to the leaderboard's worst entry
        anchor = float(leaderboard.max() if task.is_lower_better else leaderboard.min())
    if best == anchor:
        return None
    return clean_float(round((score - anchor) / (best - anchor), NORMALIZED_DECIMALS))


def report_id(task: Task) -> str:
    """The report's `competition_id`: MLE-bench's bare id for `mlebench:` tasks, else the task id."""
    from mleforge.tasks.mlebench import PREFIX

    return task.id.removeprefix(PREFIX) if task.kind == "mlebench" else task.id


def grade(task: Task, submission_path: str | Path) -> GradeReport:
    """Grade a submission file: invalid submissions get a report with their reason."""
    require_prepared(task)
    path = Path(submission_path)
    score: float | None = None
    reason: str | None = None
    try:
        score = score_frame(task, read_submission(path, submission_bounds(task)))
    except InvalidSubmission as exc:
        reason = exc.reason
    return _report(task, path, score, reason)


def no_submission_report(task: Task, submission_path: str | Path, reason: str) -> GradeReport:
    """The report of a run that left nothing to grade (earns nothing, keeps the thresholds)."""
    return _report(task, Path(submission_path), None, reason)


def _report(task: Task, path: Path, score: float | None, reason: str | None) -> GradeReport:
    scores = task.leaderboard()["score"]
    exists = path.is_file() and path.suffix.lower() == ".csv"
    # MLE-bench reads thresholds at positions of its leaderboard file as it stands.
    rank = rank_score(score, scores.to_numpy(dtype=float), task.is_lower_better,
                      presorted=task.kind == "mlebench")
    return GradeReport(
        competition_id=report_id(task),
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
