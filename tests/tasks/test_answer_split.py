"""Kaggle's public/private split: seeded by the task id, stratified, and what each part grades."""

from __future__ import annotations

import hashlib

import pandas as pd
import pytest

from mleforge.errors import ConfigError, PreparationError
from mleforge.grading.grader import grade, part_rows, sample_submission_score, score_frame
from mleforge.tasks.answer_split import public_count, public_mask, split_answers
from mleforge.tasks.preparation import prepare
from mleforge.tasks.registry import TaskRegistry
from tests.tasks.helpers import write_task


def _key(task_id, row_id):
    return int.from_bytes(hashlib.sha256(f"{task_id}\0{row_id}".encode()).digest()[:8], "big")


def test_public_count_by_hand():
    assert [public_count(n, 0.3) for n in (1, 2, 3, 4, 10, 11)] == [0, 1, 1, 1, 3, 3]
    assert public_count(2, 0.9) == 1  # never a whole stratum: the private part keeps one row


def test_the_split_is_the_lowest_hashes_of_each_class():
    answers = pd.DataFrame({"id": [5, 6, 7, 8], "y": [0, 1, 0, 1]})
    # Hashes of ("tiny", id): 5 < 7 among class 0, 6 < 8 among class 1 (computed here, not by the code).
    assert _key("tiny", 5) < _key("tiny", 7) and _key("tiny", 6) < _key("tiny", 8)
    public, private = split_answers(answers, "id", ["y"], "binary", "tiny")
    assert public["id"].tolist() == [5, 6] and private["id"].tolist() == [7, 8]
    # Row order does not matter; another task id is another split of the same rows.
    shuffled = answers.iloc[[3, 1, 0, 2]].reset_index(drop=True)
    assert sorted(split_answers(shuffled, "id", ["y"], "binary", "tiny")[0]["id"]) == [5, 6]


def test_classification_is_stratified_and_regression_is_not():
    answers = pd.DataFrame({"id": range(100), "y": [0] * 90 + [1] * 10})
    mask = public_mask(answers, "id", ["y"], "binary", "t")
    assert mask.sum() == 30 and mask[:90].sum() == 27 and mask[90:].sum() == 3
    # One-hot answers stratify by the column of the largest value.
    onehot = pd.DataFrame({"id": range(20), "a": [1.0] * 10 + [0.0] * 10, "b": [0.0] * 10 + [1.0] * 10})
    mask = public_mask(onehot, "id", ["a", "b"], "multiclass", "t")
    assert mask[:10].sum() == 3 and mask[10:].sum() == 3
    numbers = pd.DataFrame({"id": range(10), "y": [float(i) for i in range(10)]})
    ordered = sorted(range(10), key=lambda i: _key("t", i))
    assert public_mask(numbers, "id", ["y"], "regression", "t").nonzero()[0].tolist() == sorted(ordered[:3])


def test_too_few_rows_is_a_clear_error():
    with pytest.raises(PreparationError, match="1 test row"):
        public_mask(pd.DataFrame({"id": [1], "y": [0]}), "id", ["y"], "binary", "t")


@pytest.fixture
def tiny(tmp_path):
    write_task(tmp_path / "t")
    task = TaskRegistry(task_dirs=[tmp_path / "t"], include_builtin=False, data_dir=tmp_path / "d",
                        mlebench=False).get("tiny")
    prepare(task)
    return task


def _submit(tmp_path, values, ids=(5, 6, 7, 8)):
    path = tmp_path / "s.csv"
    pd.DataFrame({"id": list(ids), "y": values}).to_csv(path, index=False)
    return path


def test_preparation_writes_both_parts_and_keeps_the_whole_answers(tiny):
    private = tiny.private_dir
    assert pd.read_csv(tiny.answers_path)["id"].tolist() == [5, 6, 7, 8]
    assert pd.read_csv(tiny.public_answers_path).to_dict("list") == {"id": [5, 6], "y": [0, 1]}
    assert pd.read_csv(private / "private_answers.csv").to_dict("list") == {"id": [7, 8], "y": [0, 1]}
    assert part_rows(tiny, "public") == 2 and part_rows(tiny, "private") == 2 and part_rows(tiny, "full") == 4


def test_each_part_scores_its_own_rows(tiny, tmp_path):
    # Truth 0 1 0 1; prediction 0 1 0 0: public rows (5, 6) both right, private (7, 8) one of two.
    path = _submit(tmp_path, [0, 1, 0, 0])
    frame = pd.read_csv(path)
    assert score_frame(tiny, frame, "public") == 1.0
    assert score_frame(tiny, frame, "private") == 0.5
    assert score_frame(tiny, frame, "full") == 0.75
    report = grade(tiny, path)
    assert (report.score, report.public_score, report.part) == (0.5, 1.0, "private")
    public = grade(tiny, path, part="public", feedback="public")
    assert (public.score, public.public_score, public.part, public.feedback) == (1.0, 1.0, "public", "public")
    # The sample submission (all 0) is the normalization anchor on the same part: 0.5 on each.
    assert sample_submission_score(tiny, "public") == 0.5 and sample_submission_score(tiny, "private") == 0.5


def test_ids_are_checked_against_the_whole_test_set(tiny, tmp_path):
    # Right on every public row, but the private ids are missing: invalid on every part.
    report = grade(tiny, _submit(tmp_path, [0, 1], ids=(5, 6)), part="public")
    assert not report.valid_submission and "expected 4" in report.invalid_reason


def test_unknown_part_is_refused(tiny, tmp_path):
    with pytest.raises(ConfigError, match="part must be one of private, public, full"):
        score_frame(tiny, pd.read_csv(_submit(tmp_path, [0, 1, 0, 1])), "test")
