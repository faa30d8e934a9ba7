"""MLE-bench competitions through mleforge, on a folder laid out exactly like MLE-bench's."""

from __future__ import annotations

import json
import subprocess
import sys

import pandas as pd
import pytest

from mleforge.errors import DataNotPrepared, TaskNotFound
from mleforge.grading.grader import grade
from mleforge.grading.report import MLEBENCH_FIELDS, aggregate_reports
from mleforge.tasks.mlebench import MLEBenchSource
from mleforge.tasks.preparation import prepare
from mleforge.tasks.registry import TaskRegistry

COMP = "spaceship-mini"

CONFIG = f"""\
id: {COMP}
name: Spaceship Mini
competition_type: simple
awards_medals: false
prizes: null
description: mlebench/competitions/{COMP}/description.md

dataset:
  answers: {COMP}/prepared/private/test.csv
  sample_submission: {COMP}/prepared/public/sample_submission.csv

grader:
  name: accuracy
  grade_fn: mlebench.competitions.{COMP}.grade:grade

preparer: mlebench.competitions.{COMP}.prepare:prepare
"""

# Self-contained, in the shape of MLE-bench's grade.py files (which import mlebench helpers).
GRADE = """\
import pandas as pd


class InvalidSubmissionError(Exception):
    pass


def grade(submission: pd.DataFrame, answers: pd.DataFrame) -> float:
    if len(submission) != len(answers):
        raise InvalidSubmissionError("Submission and answers must have the same length")
    merged = answers.merge(submission, on="PassengerId", suffixes=("_true", "_pred"))
    if len(merged) != len(answers):
        raise InvalidSubmissionError("Submission ids do not match the answers")
    if merged["Transported_pred"].isna().any():
        raise ZeroDivisionError("a bug in the grader")
    return float((merged["Transported_true"] == merged["Transported_pred"]).mean())
"""


@pytest.fixture
def layout(tmp_path, monkeypatch):
    competitions = tmp_path / "mlebench" / "competitions"
    folder = competitions / COMP
    folder.mkdir(parents=True)
    (folder / "config.yaml").write_text(CONFIG)
    (folder / "grade.py").write_text(GRADE)
    (folder / "prepare.py").write_text("def prepare(raw, public, private):\n    raise NotImplementedError\n")
    (folder / "description.md").write_text("# Spaceship Mini\nPredict Transported.\n")
    # 100 teams, best first (higher is better): 1.00, 0.99, ... 0.01
    pd.DataFrame({"teamName": [f"t{i}" for i in range(100)],
                  "score": [round(1 - i / 100, 2) for i in range(100)]}).to_csv(folder / "leaderboard.csv", index=False)
    data = tmp_path / "mle-data"
    public, private = data / COMP / "prepared" / "public", data / COMP / "prepared" / "private"
    public.mkdir(parents=True)
    private.mkdir(parents=True)
    ids = [f"{i:04d}_01" for i in range(10)]
    pd.DataFrame({"PassengerId": ids, "HomePlanet": ["Earth"] * 10}).to_csv(public / "test.csv", index=False)
    pd.DataFrame({"PassengerId": ids, "Transported": [False] * 10}).to_csv(public / "sample_submission.csv", index=False)
    pd.DataFrame({"PassengerId": ids, "Transported": [True] * 7 + [False] * 3}).to_csv(private / "test.csv", index=False)
    monkeypatch.setenv("MLEBENCH_COMPETITIONS_DIR", str(competitions))
    monkeypatch.setenv("MLEBENCH_DATA_DIR", str(data))
    return tmp_path


def test_competition_is_a_task(layout):
    registry = TaskRegistry(data_dir=layout / "unused")
    assert registry.ids(include_mlebench=True)[-1] == f"mlebench:{COMP}"
    task = registry.get(f"mlebench:{COMP}")
    assert task.kind == "mlebench" and not task.is_lower_better
    assert task.spec.submission.columns == ("PassengerId", "Transported")
    assert prepare(task).status == "verified"
    assert "Predict Transported" in task.description()


def test_graded_with_its_own_grader_and_leaderboard(layout, tmp_path):
    task = TaskRegistry(data_dir=layout / "unused").get(f"mlebench:{COMP}")
    answers = pd.read_csv(task.answers_path)
    sub = answers.copy()
    sub.loc[:1, "Transported"] = ~sub.loc[:1, "Transported"]  # 8 of 10 right
    path = tmp_path / "submission.csv"
    sub.to_csv(path, index=False)
    report = grade(task, path)
    # N=100: gold = position 10 (0.91), silver position 20 (0.81), bronze position 40 (0.61).
    assert report.score == 0.8
    assert (report.gold_threshold, report.silver_threshold, report.bronze_threshold) == (0.91, 0.81, 0.61)
    assert report.bronze_medal and not report.silver_medal and report.above_median
    assert report.median_threshold == pytest.approx(0.505)
    # The sample submission (all False) scores 0.3: normalized (0.8 - 0.3) / (1.0 - 0.3).
    assert report.normalized_score == pytest.approx(0.5 / 0.7)
    d = report.to_dict()
    assert list(d)[: len(MLEBENCH_FIELDS)] == list(MLEBENCH_FIELDS)
    assert d["competition_id"] == COMP  # MLE-bench's bare id
    assert aggregate_reports([report])["total_bronze_medals"] == 1


def test_its_invalid_submission_error_is_an_invalid_submission(layout, tmp_path):
    task = TaskRegistry(data_dir=layout / "unused").get(f"mlebench:{COMP}")
    sub = pd.read_csv(task.answers_path)
    sub["PassengerId"] = sub["PassengerId"] + "x"
    sub.to_csv(tmp_path / "s.csv", index=False)
    report = grade(task, tmp_path / "s.csv")
    assert not report.valid_submission
    assert report.invalid_reason == "Submission ids do not match the answers"


def test_an_exception_of_the_grader_is_an_invalid_submission_as_in_mlebench(layout, tmp_path):
    # mlebench.grade_helpers.Grader.__call__ turns every exception into None (invalid).
    task = TaskRegistry(data_dir=layout / "unused").get(f"mlebench:{COMP}")
    sub = pd.read_csv(task.answers_path).astype({"Transported": object})
    sub.loc[0, "Transported"] = None
    sub.to_csv(tmp_path / "s.csv", index=False)
    report = grade(task, tmp_path / "s.csv")
    assert not report.valid_submission and report.submission_exists
    assert report.invalid_reason.startswith(
        "the competition's grade function raised ZeroDivisionError: a bug in the grader")


def test_unprepared_and_unknown_competitions(layout, tmp_path):
    registry = TaskRegistry(data_dir=layout / "unused")
    with pytest.raises(TaskNotFound, match="no MLE-bench competition 'nope'"):
        registry.get("mlebench:nope")
    import shutil

    shutil.rmtree(layout / "mle-data" / COMP / "prepared" / "private")
    with pytest.raises(DataNotPrepared, match=f"mlebench prepare -c {COMP}"):
        prepare(registry.get(f"mlebench:{COMP}"))


def test_cli_grades_a_competition(layout, tmp_path):
    task = TaskRegistry(data_dir=layout / "unused").get(f"mlebench:{COMP}")
    out = subprocess.run(
        [sys.executable, "-m", "mleforge.cli.main", "grade", f"mlebench:{COMP}", str(task.answers_path), "--json"],
        capture_output=True, text=True, check=True,
    )
    report = json.loads(out.stdout)
    assert report["score"] == 1.0 and report["gold_medal"] is True


def test_without_mlebench_or_overrides_the_prefix_explains(monkeypatch):
    monkeypatch.delenv("MLEBENCH_COMPETITIONS_DIR", raising=False)
    monkeypatch.delenv("MLEBENCH_DATA_DIR", raising=False)
    registry = TaskRegistry(mlebench=False)
    with pytest.raises(TaskNotFound, match="pip install 'mleforge\\[mlebench\\]'"):
        registry.get(f"mlebench:{COMP}")


def test_discovers_installed_mlebench(monkeypatch):
    """The one part that needs the real package."""
    pytest.importorskip("mlebench")
    monkeypatch.delenv("MLEBENCH_COMPETITIONS_DIR", raising=False)
    monkeypatch.delenv("MLEBENCH_DATA_DIR", raising=False)
    from mlebench.registry import registry

    source = MLEBenchSource.discover()
    assert source is not None
    assert source.competitions_dir == registry.get_competitions_dir().resolve()
    assert (source.competitions_dir / "spaceship-titanic" / "config.yaml").is_file()
