"""`mleforge eval` with the real template expert on two tasks x two seeds, then `mleforge report`."""

from __future__ import annotations

import contextlib
import io
import json

import pytest

from mleforge.cli.main import main
from mleforge.eval.records import RunReport
from mleforge.eval.runner import run_dir_for
from mleforge.grading.report import MLEBENCH_FIELDS

GRID = [(task, seed) for task in ("titanic", "penguins") for seed in (0, 1)]


def cli(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(list(argv))
    return code, out.getvalue()


@pytest.fixture(scope="module")
def template_eval(prepared_registry, data_root, tmp_path_factory):
    out = tmp_path_factory.mktemp("eval") / "template"
    args = ("eval", "--policy", "template", "--tasks", "titanic,penguins", "--seeds", "2", "--steps", "1",
            "--workers", "2", "--data-dir", str(data_root), "--out", str(out), "--json")
    code, stdout = cli(*args)
    assert code == 0
    return out, args, json.loads(stdout)


@pytest.mark.slow
def test_template_evaluation_writes_reports_and_aggregate(template_eval):
    out, _, printed = template_eval
    assert printed == json.loads((out / "aggregate.json").read_text())
    assert printed["policy"] == "template" and printed["runs"]["finished"] == 4
    assert printed["tasks"] == ["titanic", "penguins"] and printed["seeds"] == [0, 1]
    for task, seed in GRID:
        data = json.loads(run_dir_for(out, task, seed).joinpath("report.json").read_text())
        assert set(MLEBENCH_FIELDS) <= set(data)
        report = RunReport.from_dict(data)
        assert (report.task_id, report.seed, report.steps, report.stopped_by) == (task, seed, 1, "steps")
        assert report.completion_tokens > 0 and report.wall_s > 0
        if report.grade.valid_submission:
            assert report.steps_to_first_valid == 1 and report.grade.score is not None
    # The expert's first drafts are real models: valid, and better than the sample submission.
    assert printed["metrics"]["valid_submission"]["mean"] >= 0.5
    assert printed["metrics"]["normalized_score"]["mean"] > 0.3
    assert [t["task_id"] for t in printed["per_task"]] == ["titanic", "penguins"]


@pytest.mark.slow
def test_rerun_resumes_and_report_renders(template_eval, tmp_path):
    out, args, printed = template_eval
    before = {p: run_dir_for(out, *p).joinpath("result.json").stat().st_mtime_ns for p in GRID}
    code, stdout = cli(*args)
    assert code == 0 and json.loads(stdout)["metrics"] == printed["metrics"]
    assert {p: run_dir_for(out, *p).joinpath("result.json").stat().st_mtime_ns for p in GRID} == before

    code, stdout = cli("report", str(out), "--out", str(tmp_path / "report"), "--json")
    written = json.loads(stdout)
    assert code == 0 and len(written["figures"]) == 3
    md = (tmp_path / "report" / "report.md").read_text()
    assert "| template | public | 2 | 2 x 1 | 4/4 |" in md and "titanic" in md and "penguins" in md
    assert "data:image/png;base64," in (tmp_path / "report" / "report.html").read_text()


def test_eval_errors_are_reported_not_raised(data_root, tmp_path, capsys):
    code, _ = cli("eval", "--tasks", "no-such-task", "--data-dir", str(data_root), "--out", str(tmp_path))
    assert code == 2 and "no task 'no-such-task'" in capsys.readouterr().err
