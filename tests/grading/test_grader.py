"""Grading a user task with its own grade function; aggregation of reports."""

from __future__ import annotations

import dataclasses
from datetime import datetime

import pandas as pd
import pytest

from mleforge.errors import GraderError
from mleforge.grading.grader import grade, score_frame
from mleforge.grading.report import GradeReport, aggregate_reports
from mleforge.tasks.preparation import prepare
from mleforge.tasks.registry import TaskRegistry
from tests.tasks.helpers import write_task

GRADE_PY = """
class InvalidSubmissionError(Exception):
    pass

def grade(submission, answers):
    if submission["y"].max() > 1:
        raise InvalidSubmissionError("labels must be 0 or 1")
    if submission["y"].min() < 0:
        return 1 / 0  # a grader bug
    merged = answers.merge(submission, on="id")
    return float((merged["y_x"] == merged["y_y"]).mean())
"""


@pytest.fixture
def custom(tmp_path):
    write_task(tmp_path / "t", metric_lines="grade_fn: grade:grade\ndirection: higher", grade_py=GRADE_PY)
    task = TaskRegistry(task_dirs=[tmp_path / "t"], include_builtin=False, data_dir=tmp_path / "d",
                        mlebench=False).get("tiny")
    prepare(task)
    return task


def submit(tmp_path, values):
    path = tmp_path / "s.csv"
    pd.DataFrame({"id": [5, 6, 7, 8], "y": values}).to_csv(path, index=False)
    return path


def test_custom_grade_function(custom, tmp_path):
    report = grade(custom, submit(tmp_path, [0, 1, 0, 0]), part="full")
    # Leaderboard 1.0, .75, .75, .5, .5 (N=5): gold = silver = position 1 (1.0), bronze position 2 (.75).
    assert report.score == 0.75 and report.bronze_medal and not report.silver_medal
    assert report.median_threshold == 0.75 and not report.above_median
    assert report.metric == "grade:grade"
    # sample (all zeros) scores .5: normalized (0.75 - 0.5) / (1.0 - 0.5)
    assert report.normalized_score == 0.5
    # The final grade is on the private rows (ids 7, 8; tests/grading/test_split.py): the
    # grade function gets only those. 1 0 0 1 is wrong on both public rows, right on both private.
    final = grade(custom, submit(tmp_path, [1, 0, 0, 1]))
    assert (final.part, final.score, final.public_score, final.gold_medal) == ("private", 1.0, 0.0, True)
    assert final.normalized_score == 1.0  # the sample scores .5 on the private rows too


def test_custom_invalid_and_bug(custom, tmp_path):
    report = grade(custom, submit(tmp_path, [0, 2, 0, 0]))
    assert not report.valid_submission and report.invalid_reason == "labels must be 0 or 1"
    # A grader's bug raises out of nothing (issue 31: grading is total), but it does not pass
    # for the submission's fault: the report names it, in its own field.
    bug = grade(custom, submit(tmp_path, [0, -1, 0, 0]))
    assert not bug.valid_submission and bug.score is None
    assert bug.grader_error == "GraderError: the grade function of tiny (grade:grade) failed: " \
        "ZeroDivisionError: division by zero"
    assert "the grader failed" in bug.invalid_reason and "ZeroDivisionError" in bug.invalid_reason
    assert report.grader_error is None
    with pytest.raises(GraderError, match="ZeroDivisionError"):  # score_frame still raises it
        score_frame(custom, pd.DataFrame({"id": [5, 6, 7, 8], "y": [0, -1, 0, 0]}), "full")


def test_no_negative_zero_or_float_noise_in_a_report(tmp_path):
    # grade returns -y[0] / 10 + 0.1: the sample (all zeros) scores 0.1, the leaderboard's best
    # is 1.0, so normalized = (score - 0.1) / 0.9, a ratio rounded to 6 decimals.
    write_task(tmp_path / "t", metric_lines="grade_fn: grade:grade\ndirection: higher",
               grade_py="def grade(submission, answers):\n    return 0.1 - submission['y'].iloc[0] / 10\n")
    task = TaskRegistry(task_dirs=[tmp_path / "t"], include_builtin=False, data_dir=tmp_path / "d",
                        mlebench=False).get("tiny")
    prepare(task)
    noisy = grade(task, submit(tmp_path, [-4.2213, 0, 0, 0]), part="full")
    assert noisy.score == 0.52213 and noisy.normalized_score == 0.469033  # 0.42213 / 0.9 = 0.46903333...
    zero = grade(task, submit(tmp_path, [1.000001, 0, 0, 0]), part="full")  # round(0.1 - 0.1000001, 5) is -0.0
    assert repr(zero.to_dict()["score"]) == "0.0" and repr(zero.score) == "0.0"


def test_a_degenerate_named_metric_says_why(tmp_path):
    # QWK of answers and predictions that hold one label is nan in scikit-learn (and MLE-bench):
    # a built-in or folder task reports why instead of a score.
    folder = write_task(tmp_path / "t", metric_lines="metric: qwk")
    prepare_py = (folder / "prepare.py").read_text()
    (folder / "prepare.py").write_text(prepare_py.replace('"y": [0, 1, 0, 1]}).to_csv(private', '"y": [1, 1, 1, 1]}).to_csv(private'))
    task = TaskRegistry(task_dirs=[tmp_path / "t"], include_builtin=False, data_dir=tmp_path / "d",
                        mlebench=False).get("tiny")
    prepare(task)
    with pytest.warns(Warning):
        degenerate = grade(task, submit(tmp_path, [1, 1, 1, 1]), part="full")
    assert not degenerate.valid_submission and degenerate.score is None
    assert degenerate.invalid_reason.startswith("quadratic weighted kappa is undefined when the answers and the "
                                                "predictions hold a single label between them (here 1)")
    assert grade(task, submit(tmp_path, [0, 1, 1, 1]), part="full").score == 0.0  # two labels: kappa 0, defined


def report(score, valid=True, medal=None, above=False, normalized=None):
    return GradeReport(
        competition_id="t", score=score if valid else None, gold_threshold=1, silver_threshold=1,
        bronze_threshold=1, median_threshold=1, any_medal=medal is not None,
        gold_medal=medal == "gold", silver_medal=medal == "silver", bronze_medal=medal == "bronze",
        above_median=above, submission_exists=True, valid_submission=valid, is_lower_better=False,
        created_at=datetime(2026, 1, 1), submission_path="s.csv", normalized_score=normalized,
    )


def test_aggregate_by_hand():
    reports = [report(0.9, medal="gold", above=True, normalized=1.0),
               report(0.5, normalized=0.5), report(None, valid=False), report(0.8, medal="bronze", above=True, normalized=0.8)]
    agg = aggregate_reports(reports)
    assert agg["total_runs"] == 4 and agg["total_valid_submissions"] == 3
    assert (agg["total_medals"], agg["total_gold_medals"], agg["total_bronze_medals"]) == (2, 1, 1)
    assert agg["total_above_median"] == 2 and agg["any_medal_rate"] == 0.5
    assert agg["valid_submission_rate"] == 0.75
    assert agg["total_grader_errors"] == 0
    failed = dataclasses.replace(report(None, valid=False), grader_error="ValueError: boom")
    assert aggregate_reports([*reports, failed])["total_grader_errors"] == 1
    assert agg["mean_normalized_score"] == pytest.approx((1.0 + 0.5 + 0 + 0.8) / 4)
    assert agg["mean_normalized_score_valid"] == pytest.approx((1.0 + 0.5 + 0.8) / 3)


def test_report_round_trip():
    r = report(0.5, normalized=0.25)
    assert GradeReport.from_dict(r.to_dict()) == r
