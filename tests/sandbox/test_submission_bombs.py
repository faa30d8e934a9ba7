"""Bounded grading: the grading parent refuses submission bombs from their bytes, before
pandas parses anything (the size cap relative to the answers, a bounded header line,
counted lines); the result cache and the Ray transfer hold no larger submission."""

from __future__ import annotations

import tracemalloc

import pytest

from mleforge.errors import InvalidSubmission
from mleforge.grading.grader import grade, submission_bounds
from mleforge.grading.submission import SIZE_FACTOR, SIZE_MARGIN, SubmissionBounds, check_bounds
from tests.sandbox.bombs import write_bomb

REASONS = {
    "wide": "over the",
    "endless_line": "over the",
    "duplicate_names": "first line of submission.csv is longer than",
    "wide_header_small": "first line of submission.csv is longer than",
    "many_rows": "lines; expected a header and 40 rows",
}


@pytest.mark.parametrize("kind", sorted(REASONS))
def test_a_bomb_is_refused_from_its_bytes(kind, canary, tmp_path):
    columns = canary.spec.submission.columns
    path = write_bomb(kind, tmp_path / "submission.csv", columns)
    tracemalloc.start()
    try:
        report = grade(canary, path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert not report.valid_submission
    assert REASONS[kind] in report.invalid_reason, report.invalid_reason
    # pandas' own buffers are outside tracemalloc's sight, but nothing was parsed at all:
    # what Python allocated for the refusal is a few MiB of chunked reading.
    assert peak < 8 << 20, peak


def test_the_bounds_follow_the_answers(canary):
    bounds = submission_bounds(canary)
    answers = canary.answers_path.stat().st_size
    assert bounds.max_bytes == SIZE_FACTOR * answers + SIZE_MARGIN
    assert bounds.columns == ("id", "y") and bounds.rows == 40
    assert bounds.max_lines == 2 * 41 + 16


def test_a_header_with_duplicates_or_wrong_names_is_refused_before_parsing(tmp_path):
    bounds = SubmissionBounds(max_bytes=1 << 20, columns=("id", "y"), rows=2)
    cases = {
        "id,id,y\n1,1,1\n": "duplicate column name(s) id in the header",
        "id,z\n1,1\n": "missing column(s) y",
        "id,y,z\n1,1,1\n": "unexpected column(s) z",
        "id,y\n1,1\n2,2\n" + "3,3\n" * 30: "more than 22 lines",
    }
    for text, reason in cases.items():
        path = tmp_path / "submission.csv"
        path.write_text(text)
        with pytest.raises(InvalidSubmission, match=reason.replace("(", r"\(").replace(")", r"\)")):
            check_bounds(path, bounds)
    for fine in ("id,y\n1,1\n2,2\n", "\ufeff\"id\", y\r\n1,1\r\n2,2", "y,id\n1,1\n2,2\n\n\n"):
        path.write_text(fine, encoding="utf-8")
        check_bounds(path, bounds)


def test_an_honest_submission_still_grades(canary, tmp_path):
    import pandas as pd

    answers = pd.read_csv(canary.answers_path)
    path = tmp_path / "submission.csv"
    answers.to_csv(path, index=False, float_format="%.17g")
    report = grade(canary, path)
    assert report.valid_submission and report.score == 0.0


def test_a_row_of_half_a_million_fields_is_refused_from_its_length(canary, tmp_path):
    # pandas made a 533k-level index of this (issue 31: a minute of CPU, 1.1 GB); the line's
    # length refuses it before pandas sees it.
    path = tmp_path / "submission.csv"
    path.write_bytes(b"id,y\n" + b"1," * 500_000)  # under the canary's size cap
    bounds = submission_bounds(canary)
    report = grade(canary, path)
    assert not report.valid_submission and report.grader_error is None
    assert report.invalid_reason == (
        f"line 2 of submission.csv is longer than {bounds.line_bytes} bytes; "
        "write one row per test id with the columns id,y"
    )


def test_lines_break_as_pandas_breaks_them_and_fields_are_counted(tmp_path):
    bounds = SubmissionBounds(max_bytes=1 << 20, columns=("id", "y"), rows=2, line_bytes=64)
    cases = {
        "id,y\n1,1,1\n2,2\n": "line 2 of submission.csv has 3 fields; expected 2 (id,y)",
        "id,y\n1," + "9" * 100 + "\n": "line 2 of submission.csv is longer than 64 bytes",
        "id,y\r" + "1,1\r" * 30: "more than 22 lines",
        "id,Surv\rived\n1,1\n": "missing column(s) y",  # pandas' header is "Id,Surv"
    }
    for text, reason in cases.items():
        path = tmp_path / "submission.csv"
        path.write_text(text, encoding="utf-8", newline="")
        with pytest.raises(InvalidSubmission, match=reason.replace("(", r"\(").replace(")", r"\)")):
            check_bounds(path, bounds)
    for fine in ("id,y\r1,1\r2,2\r", "id,y\r\n1,1\r\n2,2", 'id,y\n1,"1,5"\n2,2\n', "id,y\n1,1\n2,2\n\n"):
        path.write_text(fine, encoding="utf-8", newline="")
        check_bounds(path, bounds)


READ_ONLY_SUBMISSION = """
import os, shutil
shutil.copy("input/sample_submission.csv", "submission/submission.csv")
os.chmod("submission/submission.csv", 0o{file_mode:o})
os.chmod("submission", 0o{dir_mode:o})
"""


@pytest.mark.parametrize("dir_mode,file_mode", [(0o500, 0o644), (0o000, 0o000), (0o300, 0o200)])
def test_a_submission_folder_the_script_closed_is_taken_or_refused_never_raised(dir_mode, file_mode, canary, tmp_path):
    # As a user (tests/sandbox/test_unprivileged.py runs this file so), chmod 0500 submission/
    # made the executor's rename raise PermissionError (issue 31); as root nothing is closed.
    from mleforge.sandbox import RunLimits, make_executor

    script = READ_ONLY_SUBMISSION.format(dir_mode=dir_mode, file_mode=file_mode)
    with make_executor("local", isolation="none", base_dir=tmp_path / "ws") as executor:
        result = executor.run(script, canary, RunLimits.of(None, canary.spec.limits))
        assert result.returncode == 0, result.stderr
        # The parent owns what the run wrote: it opens the folder again and takes the file.
        assert result.submission_path is not None, result.warnings
        report = grade(canary, result.submission_path)
    assert report.valid_submission and report.grader_error is None, report.invalid_reason


def test_a_submission_the_grader_cannot_read_is_invalid_with_its_reason(canary, tmp_path):
    path = tmp_path / "submission.csv"
    path.write_text("id,y\n")
    path.chmod(0)
    try:
        path.read_bytes()
        pytest.skip("root reads a file of mode 0; tests/sandbox/test_submission_as_user.py covers it")
    except PermissionError:
        pass
    report = grade(canary, path)
    assert not report.valid_submission and report.grader_error is None
    assert report.invalid_reason.startswith("submission.csv cannot be read (PermissionError: Permission denied)")
