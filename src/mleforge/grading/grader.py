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

Which rows count (Kaggle's public/private split, `tasks.answer_split`): `part="private"` (the
final grade), `"public"` (what the agent and the search see) or `"full"`. The submission is
checked against the whole test set first (every id, every row), then only the part's rows
are scored. For `mlebench:` ids the final grade stays MLE-bench's own grade on all rows, so
numbers compare with published ones ("private" is "full" there), and "public" is a seeded
subset of the answers' rows given to the competition's grade function.

Grading is total: `grade` turns every submission into a report, whatever its bytes (their
shape is checked before pandas parses them: `grading.submission.SubmissionBounds`). A
failure of the grader itself on a submission (a `GraderError`, or any exception of pandas',
scikit-learn's or a grade function's) makes an invalid report whose `grader_error` names
the exception, logged as a warning: never an exception out of `grade`, never a score.

Every score is rounded as MLE-bench rounds it: `round(score, 5)` on the value the grade
function returned, so an `np.float64` rounds by numpy's rule (0.934375 -> 0.93438) and a
Python float by Python's (0.934375 -> 0.93437).
"""

from __future__ import annotations

import copy
import json
import logging
import math
import threading
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from mleforge.errors import (
    ConfigError,
    GraderError,
    InvalidSubmission,
    MleforgeError,
    TaskSpecError,
)
from mleforge.grading.medals import rank_score
from mleforge.grading.metrics import get_metric, undefined_reason
from mleforge.grading.report import GradeReport
from mleforge.grading.submission import (
    SubmissionBounds,
    _id_key,
    check_columns,
    prepare_for_metric,
    read_csv_like_mlebench,
    read_submission,
)
from mleforge.tasks.answer_split import PARTS, public_mask
from mleforge.tasks.preparation import require_prepared
from mleforge.tasks.task import Task

# MLE-bench rounds every score to 5 decimals before ranking it.
SCORE_DECIMALS = 5
# Normalized scores are ratios of 5-decimal scores: 6 decimals keep them exact enough to
# compare and free of float noise such as 0.5801350000000001.
NORMALIZED_DECIMALS = 6

logger = logging.getLogger(__name__)

_answers_cache: dict[tuple[str, int, int], Any] = {}
_anchor_cache: dict[tuple[tuple[str, int, int], str], float | None] = {}
_mask_cache: dict[tuple[Any, ...], np.ndarray] = {}
_bounds_cache: dict[tuple[Any, ...], SubmissionBounds] = {}
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
    answers file, its header, its number of lines, the length and fields of each line
    (MLE-bench's grade functions decide rows themselves: size and header line only there)."""
    if task.kind == "mlebench":
        # MLE-bench's grader decides columns (extra ones reach it) and rows itself: size only.
        return SubmissionBounds.for_answers(task.answers_path, None, None)
    key = (_file_key(task.answers_path), task.spec.submission.columns)
    with _cache_lock:
        cached = _bounds_cache.get(key)
    if cached is None:  # the answers' longest line is read once per file version
        cached = SubmissionBounds.for_answers(task.answers_path, task.spec.submission.columns,
                                              len(load_answers(task)))
        with _cache_lock:
            _bounds_cache[key] = cached
    return cached



def _check_part(part: str) -> None:
    if part not in PARTS:
        raise ConfigError(f"part must be one of {', '.join(PARTS)}; got {part!r}")


def _public_ids_mask(task: Task, answers: pd.DataFrame) -> np.ndarray:
    """A built-in or folder task's public rows among its answers' rows: the ids of
    private/public_answers.csv, which the preparation wrote."""
    key = ("local", _file_key(task.answers_path), _file_key(task.public_answers_path))
    with _cache_lock:
        cached = _mask_cache.get(key)
    if cached is None:
        id_column = task.spec.submission.id_column
        public_ids = set(_id_key(pd.read_csv(task.public_answers_path, dtype=str)[id_column]))
        cached = _id_key(answers[id_column]).isin(public_ids).to_numpy()
        with _cache_lock:
            _mask_cache[key] = cached
    return cached


def _rows(task: Task, answers: pd.DataFrame, part: str) -> np.ndarray:
    public = _public_ids_mask(task, answers)
    return public if part == "public" else ~public


def part_rows(task: Task, part: str = "private") -> int:
    """How many answer rows a part holds (a built-in or folder task's)."""
    _check_part(part)
    answers = load_answers(task)
    if part == "full":
        return len(answers)
    return int(_rows(task, answers, part).sum())


def _take(values: Any, rows: np.ndarray) -> Any:
    """The rows of a metric input (an array, or a list for rankings) that `rows` marks."""
    if isinstance(values, np.ndarray):
        return values[rows]
    return [v for v, keep in zip(values, rows) if keep]


def score_frame(task: Task, submission: pd.DataFrame, part: str = "private") -> float:
    """The rounded metric value of a submission frame on one part of the answers, or
    InvalidSubmission (judged on the whole test set, whatever the part).

    For `mlebench:` tasks the value may be nan (MLE-bench's valid nan score).
    """
    _check_part(part)
    if task.kind == "mlebench":
        return _score_mlebench(task, submission, part)
    answers = load_answers(task)
    fmt = task.spec.submission
    grade_fn = task.grade_callable
    rows = None if part == "full" else _rows(task, answers, part)
    if grade_fn is None:
        metric = get_metric(task.spec.metric or "")
        y_true, y_pred = prepare_for_metric(submission, answers, fmt.id_column, fmt.target_columns, metric)
        if rows is not None:
            y_true, y_pred = _take(y_true, rows), _take(y_pred, rows)
        if metric.kind == "ranking":
            y_true, y_pred = _by_id(answers[fmt.id_column], rows, y_true, y_pred)
        score = _call_metric(task, metric, y_true, y_pred)
    else:
        check_columns(submission, fmt.columns)
        if len(submission) != len(answers):
            raise InvalidSubmission(f"the submission has {len(submission)} rows; expected {len(answers)}")
        # The whole submission first: what makes it invalid on any row makes it invalid.
        score = _call_task_grade(task, submission, answers)
        if rows is not None:
            part_ids = set(_id_key(answers[fmt.id_column][rows]))
            submission = submission[_id_key(submission[fmt.id_column]).isin(part_ids).to_numpy()]
            score = _call_task_grade(task, submission.reset_index(drop=True), answers[rows].reset_index(drop=True))
    return clean_float(mlebench_round(score))


def _by_id(ids: pd.Series, rows: np.ndarray | None, y_true: list, y_pred: list) -> tuple[list, list]:
    """Ranking inputs in the order MLE-bench's MAP@k graders sum them: sorted by id
    (`sort_values` on the answers' id column), not in the answers' order."""
    if rows is not None:
        ids = ids[rows]
    order = ids.reset_index(drop=True).sort_values().index
    return [y_true[i] for i in order], [y_pred[i] for i in order]


def _call_metric(task: Task, metric: Any, y_true: Any, y_pred: Any) -> Any:
    """A named metric on validated inputs: nan (undefined) or an overflow to inf makes the
    submission invalid; an exception of the metric's (the submission passed every check)
    is a GraderError, which `grade` reports as such."""
    try:
        with np.errstate(all="ignore"):  # an overflow is reported below, not warned about
            score = metric(y_true, y_pred)
    except Exception as exc:
        raise GraderError(f"metric {metric.name} cannot score task {task.id}: {type(exc).__name__}: {exc}") from exc
    if _is_nan(score):
        raise InvalidSubmission(undefined_reason(metric, y_true, y_pred))
    if not math.isfinite(score):
        raise InvalidSubmission(
            f"{metric.name} of these predictions is {score} (it overflowed): predictions must be "
            "finite numbers on the scale of the target"
        )
    return score


def _call_task_grade(task: Task, submission: pd.DataFrame, answers: pd.DataFrame) -> Any:
    """A built-in or folder task's own grade function: its InvalidSubmissionError, or a
    score of inf or nan, makes the submission invalid; any other exception, or a score that
    is not a number, is a bug of the grade function (a GraderError, which `grade` reports
    as such)."""
    grade_fn = task.grade_callable
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
    try:
        value = float(score)
    except (TypeError, ValueError):
        raise GraderError(f"the grade function of {task.id} returned {score!r:.80}, not a number") from None
    if not math.isfinite(value):
        # A number all the same: the submission's values made it so (1e200 squared).
        raise InvalidSubmission(f"the grade function of {task.id} scored this submission {value}, not a finite number")
    return score


def _call_mlebench(task: Task, submission: pd.DataFrame, answers: Any) -> Any:
    """`mlebench.grade_helpers.Grader.__call__`: every exception of the grade function makes
    the submission invalid (a grade.py that cannot be loaded is the task's error, raised)."""
    grade_fn = task.grade_callable
    try:
        return grade_fn(submission, answers)
    except Exception as exc:
        if type(exc).__name__ == "InvalidSubmissionError":
            raise InvalidSubmission(str(exc)) from None
        raise InvalidSubmission(
            f"the competition's grade function raised {type(exc).__name__}: {exc} "
            "(MLE-bench counts this as an invalid submission)"
        ) from None


def mlebench_public_rows(task: Task, answers: Any) -> tuple[str, np.ndarray]:
    """An `mlebench:` competition's public part: (id column, mask over the answers' rows),
    a seeded 30% of the rows by the id column the sample submission starts with."""
    header = [str(c) for c in pd.read_csv(task.sample_submission_path, nrows=0).columns]
    id_column = header[0] if header else ""
    if not isinstance(answers, pd.DataFrame) or id_column not in answers.columns:
        raise GraderError(
            f"{task.id} has no public part: its answers have no column {id_column!r} (the sample "
            "submission's first column) to choose public rows by; run it with --feedback none"
        )
    key = ("mlebench", _file_key(task.answers_path))
    with _cache_lock:
        cached = _mask_cache.get(key)
    if cached is None:
        # Not stratified: MLE-bench's config does not say which column is the label.
        cached = public_mask(answers, id_column, (), "regression", task.id)
        with _cache_lock:
            _mask_cache[key] = cached
    return id_column, cached


def _score_mlebench(task: Task, submission: pd.DataFrame, part: str) -> float:
    """MLE-bench's grade on all rows ("private" and "full"); on the public part, the
    grade function on the public rows of a submission that its full grade accepts."""
    answers = load_answers(task)
    score = _call_mlebench(task, submission, answers)
    if part == "public":
        id_column, rows = mlebench_public_rows(task, answers)
        if id_column not in submission.columns:
            raise InvalidSubmission(f"the submission has no column {id_column}; the header must start with it")
        public_ids = set(_id_key(answers[id_column][rows]))
        public_submission = submission[_id_key(submission[id_column]).isin(public_ids).to_numpy()]
        score = _call_mlebench(task, public_submission.reset_index(drop=True),
                               answers[rows].reset_index(drop=True))
    if score is None:
        raise GraderError(f"the grade function of {task.id} returned None, not a score")
    return clean_float(mlebench_round(score))


def _is_nan(value: Any) -> bool:
    try:
        return math.isnan(value)
    except TypeError:
        return False


def sample_submission_score(task: Task, part: str = "private") -> float | None:
    """The score of the task's sample submission (the naive baseline) on `part`, or None if
    it is not a valid submission (or scores nan). Cached per sample file and part."""
    _check_part(part)
    key = (_file_key(task.sample_submission_path), part)
    with _cache_lock:
        if key in _anchor_cache:
            return _anchor_cache[key]
    try:
        anchor: float | None = score_frame(task, read_submission(task.sample_submission_path,
                                                                 submission_bounds(task)), part)
    except InvalidSubmission:
        anchor = None
    if anchor is not None and math.isnan(anchor):
        anchor = None
    with _cache_lock:
        _anchor_cache[key] = anchor
    return anchor


def _normalized(task: Task, score: float | None, leaderboard: pd.Series, part: str) -> float | None:
    """0 at the sample submission's score (on the same part), 1 at the leaderboard's best;
    None when invalid."""
    if score is None or math.isnan(score):
        return None
    anchor = sample_submission_score(task, part)
    best = float(leaderboard.min() if task.is_lower_better else leaderboard.max())
    if anchor is None:  # fall back to the leaderboard's worst entry
        anchor = float(leaderboard.max() if task.is_lower_better else leaderboard.min())
    if best == anchor:
        return None
    return clean_float(round((score - anchor) / (best - anchor), NORMALIZED_DECIMALS))


def _is_csv_file(path: Path) -> bool:
    """Is there a .csv file at `path`? False too when a folder on the way cannot be read."""
    try:
        return path.is_file() and path.suffix.lower() == ".csv"
    except OSError:
        return False


def report_id(task: Task) -> str:
    """The report's `competition_id`: MLE-bench's bare id for `mlebench:` tasks, else the task id."""
    from mleforge.tasks.mlebench import PREFIX

    return task.id.removeprefix(PREFIX) if task.kind == "mlebench" else task.id


def reported_part(task: Task, part: str) -> str:
    """The part a report's `score` is on: an `mlebench:` final grade is MLE-bench's full one."""
    return "full" if task.kind == "mlebench" and part == "private" else part


def grade(task: Task, submission_path: str | Path, part: str = "private",
          feedback: str | None = None) -> GradeReport:
    """Grade a submission file on `part` of the answers: every submission gets a report,
    valid with a finite score (or an `mlebench:` grader's nan) or invalid with its reason;
    nothing the submission holds raises out of here. `public_score` is the public part's score beside it; `feedback` is
    the protocol of the run that made the submission ("public", "none"), for the record."""
    _check_part(part)
    require_prepared(task)
    path = Path(submission_path)
    bounds = submission_bounds(task)
    score: float | None = None
    public: float | None = None
    reason: str | None = None
    error: str | None = None
    try:
        submission = read_submission(path, bounds)
        score = score_frame(task, submission, part)
        public = score if part == "public" else _public_or_none(task, submission)
    except InvalidSubmission as exc:
        score, public, reason = None, None, exc.reason
    except Exception as exc:
        if isinstance(exc, MleforgeError) and not isinstance(exc, GraderError):
            raise  # the task's or the set-up's (a grader that cannot load): no submission's
        score, public = None, None
        reason, error = _grader_failed(task, path, exc)
    return _report(task, path, score, reason, reported_part(task, part), public, feedback, error)


def _grader_failed(task: Task, path: Path, exc: Exception) -> tuple[str, str]:
    """(reason, grader_error) of a grader's failure on this submission (the task's grade
    function's, scikit-learn's, pandas'): the submission cannot be scored, so it is invalid,
    but the report says it was the grader (`grader_error`), and the log says so loudly."""
    error = f"{type(exc).__name__}: {' '.join(str(exc).split())[:500]}"
    logger.warning("grading %s of %s failed: %s", path, task.id, error, exc_info=exc)
    return f"the grader failed on this submission ({error})", error


def _public_or_none(task: Task, submission: pd.DataFrame) -> float | None:
    """The public score beside a final grade; None for a competition without a public part."""
    try:
        return score_frame(task, submission, "public")
    except InvalidSubmission:
        return None  # valid on the whole test set, undefined on the public rows (one label)
    except GraderError:
        if task.kind == "mlebench":
            return None
        raise


def no_submission_report(task: Task, submission_path: str | Path, reason: str,
                         part: str = "private", feedback: str | None = None) -> GradeReport:
    """The report of a run that left nothing to grade (earns nothing, keeps the thresholds)."""
    _check_part(part)
    return _report(task, Path(submission_path), None, reason, reported_part(task, part), None, feedback)


def _report(task: Task, path: Path, score: float | None, reason: str | None, part: str,
            public_score: float | None, feedback: str | None, grader_error: str | None = None) -> GradeReport:
    scores = task.leaderboard()["score"]
    exists = _is_csv_file(path)
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
        normalized_score=_normalized(task, score, scores, "full" if part == "full" else part),
        invalid_reason=reason,
        part=part,
        public_score=public_score,
        feedback=feedback,
        grader_error=grader_error,
    )
