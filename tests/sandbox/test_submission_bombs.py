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
