"""Grading is total (issue 31): whatever a script writes as its submission, `grade` returns a
report, valid with a finite score or invalid with a reason, and no grader error: each
finding of the issue as an exact case (tests/grading/test_total_fuzz.py feeds malformed
submissions to every named metric and every built-in task)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from mleforge.errors import InvalidSubmission
from mleforge.grading.grader import grade, load_answers, score_frame
from mleforge.grading.metrics import get_metric
from mleforge.grading.submission import prepare_for_metric
from mleforge.tasks.preparation import prepare
from mleforge.tasks.registry import TaskRegistry
from tests.tasks.helpers import write_task


def write_filled(task, path: Path, fill) -> Path:
    """The answers' ids in order, every target column holding `fill`."""
    fmt = task.spec.submission
    frame = pd.DataFrame({fmt.id_column: load_answers(task)[fmt.id_column]})
    for column in fmt.target_columns:
        frame[column] = fill
    frame.to_csv(path, index=False)
    return path


def assert_total(report) -> None:
    assert report.grader_error is None, report.grader_error
    if report.valid_submission:
        assert report.score is not None and math.isfinite(report.score), report.score
        assert report.public_score is None or math.isfinite(report.public_score)
    else:
        assert report.score is None and report.invalid_reason


# -- the findings, one exact case each ------------------------------------------------


def test_probabilities_in_a_binary_accuracy_task_are_invalid_not_a_grader_error(prepared_registry, tmp_path):
    titanic = prepared_registry.get("titanic")
    report = grade(titanic, write_filled(titanic, tmp_path / "submission.csv", 0.5))
    assert_total(report)
    assert not report.valid_submission and report.invalid_reason.startswith(
        "column Survived must hold integer labels like the answers (not probabilities); found e.g. 0.5, 0.5, 0.5"
    )


def test_a_lone_carriage_return_in_the_header_breaks_the_line_as_pandas_does(prepared_registry, tmp_path):
    titanic = prepared_registry.get("titanic")
    path = write_filled(titanic, tmp_path / "submission.csv", 0)
    path.write_bytes(path.read_bytes().replace(b"Survived", b"Surv\rived", 1))
    report = grade(titanic, path)
    assert_total(report)
    assert report.invalid_reason == "missing column(s) Survived; the header must be: PassengerId,Survived"


def test_a_regression_submission_that_overflows_its_metric_is_invalid(prepared_registry, tmp_path):
    for task_id, metric in (("chicago-ridership", "rmse"), ("diabetes", "mae")):
        task = prepared_registry.get(task_id)
        report = grade(task, write_filled(task, tmp_path / "submission.csv", "1e200" if metric == "rmse" else "1e308"))
        assert_total(report)
        assert report.invalid_reason == (
            f"{metric} of these predictions is inf (it overflowed): predictions must be finite numbers on the "
            "scale of the target"
        )


# -- rmsle on (-1, 0) and MAP@5's order, as MLE-bench's graders -------------------------


def test_rmsle_takes_predictions_above_minus_one():
    answers = pd.DataFrame({"id": [1, 2], "y": [0.0, math.e - 1]})
    metric = get_metric("rmsle")
    y_true, y_pred = prepare_for_metric(pd.DataFrame({"id": [1, 2], "y": [-0.5, math.e - 1]}), answers,
                                        "id", ("y",), metric)
    # log1p(0) - log1p(-0.5) = ln 2, then 0: sqrt((ln 2)^2 / 2) = ln 2 / sqrt 2
    assert metric(y_true, y_pred) == pytest.approx(math.log(2) / math.sqrt(2), rel=1e-15)
    with pytest.raises(InvalidSubmission, match=r"1 predictions in column y are <= -1; RMSLE needs predictions > -1"):
        prepare_for_metric(pd.DataFrame({"id": [1, 2], "y": [-1.0, 0.0]}), answers, "id", ("y",), metric)


# The rank of the one right label in each row, by id 1..64 (0: not among the 5 guesses):
# AP@5 = 1 / rank. The exact mean is 25/64 = 0.390625, a tie at the 5th decimal, so the
# order of numpy's pairwise sum decides the rounding: by id (MLE-bench's graders sort by
# id) it is 0.39062; in the answers' order (ids 64..1) it would be 0.39063.
RANKS = "2040450235421155051153441100041221001141145533452000204321031445"

MAP_PREPARE = f'''\
import pandas as pd

RANKS = "{RANKS}"


def prepare(raw, public, private):
    ids = list(range(64, 0, -1))  # the answers in descending id order
    pd.DataFrame({{"id": [100], "x": [0.0], "y": ["a"]}}).to_csv(public / "train.csv", index=False)
    pd.DataFrame({{"id": ids, "x": [0.0] * 64}}).to_csv(public / "test.csv", index=False)
    pd.DataFrame({{"id": ids, "y": ["b"] * 64}}).to_csv(public / "sample_submission.csv", index=False)
    pd.DataFrame({{"id": ids, "y": ["a"] * 64}}).to_csv(private / "answers.csv", index=False)
'''


def test_map_at_5_sums_its_rows_in_id_order_as_mlebench(tmp_path):
    folder = write_task(tmp_path / "t", metric_lines="metric: map@5")
    (folder / "prepare.py").write_text(MAP_PREPARE)
    task = TaskRegistry(task_dirs=[folder], include_builtin=False, data_dir=tmp_path / "d", mlebench=False).get("tiny")
    prepare(task)

    def guesses(rank: int) -> str:
        names = ["w", "x", "y", "z", "v"]
        if rank:
            names[rank - 1] = "a"
        return " ".join(names)

    ids = list(range(64, 0, -1))
    submission = pd.DataFrame({"id": ids, "y": [guesses(int(RANKS[i - 1])) for i in ids]})
    ap = {i: 1 / int(RANKS[i - 1]) if RANKS[i - 1] != "0" else 0.0 for i in ids}
    assert round(np.mean([ap[i] for i in sorted(ids)]), 5) == 0.39062  # MLE-bench's order
    assert round(np.mean([ap[i] for i in ids]), 5) == 0.39063  # the answers' order
    assert score_frame(task, submission, "full") == 0.39062


def test_an_mlebench_style_submission_with_more_fields_than_its_header_is_refused_before_parsing(tmp_path):
    """No expected header (an `mlebench:` task's bounds): a data line may not hold more
    unquoted fields than the file's own header, so a row of 400k fields never reaches pandas."""
    from mleforge.grading.submission import SubmissionBounds, check_bounds

    answers = tmp_path / "answers.csv"
    answers.write_text("id,x\n" + "".join(f"{i},{i}\n" for i in range(20000)))
    bounds = SubmissionBounds.for_answers(answers, None, None)
    bomb = tmp_path / "submission.csv"
    bomb.write_text("id,x\n" + "1," * 400_000 + "\n")
    with pytest.raises(InvalidSubmission, match=r"line 2 of submission.csv has 400001 fields; its header has 2"):
        check_bounds(bomb, bounds)
    fine = tmp_path / "fine.csv"
    fine.write_text('id,x\n1,"a,b"\r\n2,3\n')  # quoted commas and CRLF are not extra fields
    check_bounds(fine, bounds)
