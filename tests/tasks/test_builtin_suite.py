"""Conformance of every built-in task: preparation, the data contract and its grading."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from mleforge.grading.grader import grade
from mleforge.grading.metrics import get_metric
from mleforge.tasks.preparation import MANIFEST, prepare, sha256_file
from mleforge.tasks.registry import BUILTIN_DIR, TaskRegistry

BUILTIN_IDS = sorted(p.name for p in BUILTIN_DIR.iterdir() if (p / "task.yaml").is_file())


def test_suite_covers_what_users_need():
    registry = TaskRegistry(data_dir="/nonexistent", mlebench=False)
    specs = [t.spec for t in registry.tasks()]
    assert len(specs) >= 12
    assert len({s.metric for s in specs}) >= 8
    assert {s.modality for s in specs} >= {"tabular", "text", "image", "time-series"}
    assert {s.problem for s in specs} >= {"binary", "multiclass", "regression"}
    assert 6 <= sum("lite" in s.tags for s in specs) <= 10
    assert {"titanic", "house-prices"} <= {s.id for s in specs}


@pytest.fixture(scope="module", params=BUILTIN_IDS)
def task(request, prepared_registry):
    return prepared_registry.get(request.param)


def test_prepares_to_identical_checksums(task, tmp_path):
    first = json.loads((task.data_dir / "prepared" / MANIFEST).read_text())["files"]
    other = TaskRegistry(data_dir=tmp_path, mlebench=False).get(task.id)
    prepare(other)
    second = json.loads((other.data_dir / "prepared" / MANIFEST).read_text())["files"]
    assert first == second


def test_data_contract(task):
    public, private = task.public_dir, task.private_dir
    assert sorted(p.name for p in public.iterdir()) == [
        "description.md", "sample_submission.csv", "test.csv", "train.csv",
    ]
    assert sorted(p.name for p in private.iterdir()) == ["answers.csv", "private_answers.csv", "public_answers.csv"]
    fmt = task.spec.submission
    train = pd.read_csv(public / "train.csv")
    test = pd.read_csv(public / "test.csv")
    sample = pd.read_csv(task.sample_submission_path)
    answers = pd.read_csv(task.answers_path)
    assert list(sample.columns) == list(fmt.columns) == list(answers.columns)
    assert task.spec.target in train.columns
    assert not ({task.spec.target, *fmt.target_columns} & set(test.columns))
    assert test[fmt.id_column].tolist() == answers[fmt.id_column].tolist() == sample[fmt.id_column].tolist()
    assert not set(train[fmt.id_column]) & set(test[fmt.id_column])
    assert not answers.isna().any().any()
    # Kaggle's split: the two parts partition the answers' rows, about 30% public, and for
    # classification every class of two or more test rows is in both parts.
    public_part = pd.read_csv(task.public_answers_path)
    private_part = pd.read_csv(task.private_answers_path)
    ids = answers[fmt.id_column].tolist()
    assert sorted(public_part[fmt.id_column].tolist() + private_part[fmt.id_column].tolist()) == sorted(ids)
    assert [i for i in ids if i in set(public_part[fmt.id_column])] == public_part[fmt.id_column].tolist()
    assert abs(len(public_part) / len(answers) - 0.3) < 0.02
    if task.spec.problem != "regression" and len(fmt.target_columns) == 1:
        (target,) = fmt.target_columns
        counts = answers[target].value_counts()
        assert set(counts[counts >= 2].index) <= set(public_part[target]) <= set(answers[target])
        assert set(private_part[target]) == set(answers[target])


def test_no_private_file_under_public(task):
    private_hashes = {sha256_file(p) for p in task.private_dir.rglob("*") if p.is_file()}
    public_hashes = {sha256_file(p) for p in task.public_dir.rglob("*") if p.is_file()}
    assert not private_hashes & public_hashes
    assert not any(p.name == "answers.csv" for p in task.public_dir.rglob("*"))


def test_sample_submission_is_valid(task):
    report = grade(task, task.sample_submission_path)
    assert report.valid_submission, report.invalid_reason
    assert report.normalized_score == 0.0


def test_answers_score_best_possible_and_gold(task):
    report = grade(task, task.answers_path)
    assert report.valid_submission
    assert report.score == get_metric(task.spec.metric).best
    assert report.gold_medal and report.any_medal and report.above_median


def _write(frame: pd.DataFrame, path) -> str:
    frame.to_csv(path, index=False)
    return str(path)


def _reason(task, frame_or_path, tmp_path) -> str:
    path = frame_or_path if isinstance(frame_or_path, str) else _write(frame_or_path, tmp_path / "sub.csv")
    report = grade(task, path)
    assert not report.valid_submission and report.score is None and not report.any_medal
    return report.invalid_reason


def test_malformed_submissions_get_specific_reasons(task, tmp_path):
    answers = pd.read_csv(task.answers_path)
    fmt = task.spec.submission
    target = fmt.target_columns[0]
    kind = get_metric(task.spec.metric).kind

    assert "no submission file" in _reason(task, str(tmp_path / "missing.csv"), tmp_path)
    (tmp_path / "sub.json").write_text("{}")
    assert "not a .csv file" in _reason(task, str(tmp_path / "sub.json"), tmp_path)
    (tmp_path / "binary.csv").write_bytes(b"\xff\xfe\x00\x01garbage\x80\x81")
    assert "not UTF-8" in _reason(task, str(tmp_path / "binary.csv"), tmp_path)
    (tmp_path / "empty.csv").write_bytes(b"")
    assert "empty" in _reason(task, str(tmp_path / "empty.csv"), tmp_path)

    assert "missing column(s) " + target in _reason(task, answers.drop(columns=[target]), tmp_path)
    assert "unexpected column(s) extra" in _reason(task, answers.assign(extra=1), tmp_path)
    assert f"has {len(answers) - 1} rows; expected {len(answers)}" in _reason(task, answers.iloc[1:], tmp_path)

    shifted = answers.copy()
    shifted[fmt.id_column] = shifted[fmt.id_column] + 10**7
    assert "do not match the test set" in _reason(task, shifted, tmp_path)
    duplicated = answers.copy()
    duplicated.loc[1, fmt.id_column] = duplicated.loc[0, fmt.id_column]
    assert "duplicate ids" in _reason(task, duplicated, tmp_path)

    with_nan = answers.astype({target: object})
    with_nan.loc[3, target] = np.nan
    assert "missing (NaN or empty)" in _reason(task, with_nan, tmp_path)

    if kind in ("probability", "number") or pd.api.types.is_numeric_dtype(answers[target]):
        words = answers.astype({target: object})
        words.loc[2, target] = "banana"
        assert "not numbers" in _reason(task, words, tmp_path)
    if kind == "probability":
        out_of_range = answers.astype({target: float})
        out_of_range.loc[0, target] = 1.5
        assert "outside [0, 1]" in _reason(task, out_of_range, tmp_path)


def test_rows_in_any_order_grade_the_same(task, tmp_path):
    answers = pd.read_csv(task.answers_path)
    shuffled = answers.sample(frac=1.0, random_state=0)
    report = grade(task, _write(shuffled, tmp_path / "shuffled.csv"))
    assert report.score == get_metric(task.spec.metric).best
