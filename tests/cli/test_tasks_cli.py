"""The CLI as users and scripts run it: a real process, JSON out."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest


def run(*args, data_root, check=True):
    env = {**os.environ, "MLEFORGE_DATA": str(data_root), "COLUMNS": "300"}
    return subprocess.run([sys.executable, "-m", "mleforge", *args], capture_output=True, text=True,
                          env=env, check=check)


def test_tasks_list_json(tmp_path):
    items = json.loads(run("tasks", "list", "--json", data_root=tmp_path).stdout)
    assert len(items) >= 12
    for item in items:
        assert {"id", "metric", "direction", "modality", "tags", "rows"} <= set(item)
    titanic = next(i for i in items if i["id"] == "titanic")
    assert titanic["metric"] == "accuracy" and titanic["direction"] == "higher" and "lite" in titanic["tags"]
    assert titanic["rows"] == {"train": None, "test": None}


def test_prepare_show_and_grade(tmp_path):
    first = json.loads(run("tasks", "prepare", "titanic", "penguins", "--json", data_root=tmp_path).stdout)
    assert [r["status"] for r in first] == ["prepared", "prepared"]
    again = json.loads(run("tasks", "prepare", "titanic", "--json", data_root=tmp_path).stdout)
    assert again[0]["status"] == "verified"
    shown = json.loads(run("tasks", "show", "titanic", "--json", data_root=tmp_path).stdout)
    assert shown["rows"] == {"train": 1047, "test": 262}
    assert "## Evaluation" in shown["description"]

    answers = tmp_path / "titanic" / "prepared" / "private" / "answers.csv"
    report = json.loads(run("grade", "titanic", str(answers), "--json", data_root=tmp_path).stdout)
    assert report["score"] == 1.0 and report["gold_medal"] and report["valid_submission"]
    missing = run("grade", "titanic", str(tmp_path / "nope.csv"), data_root=tmp_path, check=False)
    assert missing.returncode == 1 and "no submission file" in missing.stdout
    bad = tmp_path / "bad.csv"
    bad.write_text("PassengerId,Survived\n1,1\n")
    invalid = run("grade", "titanic", str(bad), "--json", data_root=tmp_path, check=False)
    assert invalid.returncode == 1 and not json.loads(invalid.stdout)["valid_submission"]


@pytest.mark.parametrize(
    "args, message",
    [
        (("tasks", "show", "nope"), "no task 'nope'"),
        (("tasks", "prepare"), "name task ids, or pass --all"),
        (("grade", "titanic", "x.csv"), "mleforge tasks prepare titanic"),
    ],
)
def test_errors_exit_2_with_a_message(tmp_path, args, message):
    out = run(*args, data_root=tmp_path, check=False)
    assert out.returncode == 2
    assert message in " ".join(out.stderr.split())


def test_tasks_list_shows_a_broken_task_folder(tmp_path):
    folder = tmp_path / "tasks" / "broken-one"
    folder.mkdir(parents=True)
    (folder / "task.yaml").write_text("id: broken-one\n")  # no name, metric, preparer...
    table = run("tasks", "list", "--tasks-dir", str(tmp_path / "tasks"), data_root=tmp_path).stdout
    assert "1 broken task folder(s)" in table and "broken-one" in table and "key `name`: missing" in table
    items = json.loads(run("tasks", "list", "--tasks-dir", str(tmp_path / "tasks"), "--json",
                           data_root=tmp_path).stdout)
    (broken,) = [i for i in items if i.get("broken")]
    assert broken["name"] == "broken-one" and broken["folder"] == str(folder) and broken["error"]
    assert any(i["id"] == "titanic" for i in items)  # every other task still listed


def test_run_with_feedback_none_records_the_protocol(tmp_path):
    run("tasks", "prepare", "penguins", data_root=tmp_path)
    out = run("run", "--task", "penguins", "--policy", "template", "--steps", "1", "--feedback", "none",
              "--run-dir", str(tmp_path / "run"), "--json", data_root=tmp_path)
    result = json.loads(out.stdout)
    assert result["feedback"] == "none" and result["report"]["feedback"] == "none"
    assert result["report"]["part"] == "private" and result["report"]["valid_submission"]
    journal = json.loads((tmp_path / "run" / "journal.json").read_text())
    assert [n["score"] for n in journal["nodes"]] == [None] and journal["nodes"][0]["valid"]
    bad = run("run", "--task", "penguins", "--feedback", "private", data_root=tmp_path, check=False)
    assert bad.returncode == 2 and "invalid choice: 'private'" in bad.stderr


def test_leaderboard_check_of_a_sample(tmp_path):
    done = json.loads(run("tasks", "leaderboard", "penguins", "--check", "--sample", "3", "--json",
                          data_root=tmp_path).stdout)
    assert [(r["id"], r["same"], r["differences"]) for r in done] == [("penguins", True, [])]
    refused = run("tasks", "leaderboard", "penguins", "--sample", "3", data_root=tmp_path, check=False)
    assert refused.returncode != 0
    assert "--sample checks part of a committed leaderboard: use it with --check" in refused.stderr
