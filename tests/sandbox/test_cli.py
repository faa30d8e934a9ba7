"""`mleforge exec`: run a script in a task's sandbox, print the result and its grade."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mleforge.cli.main import main
from tests.sandbox.conftest import CANARY_TASK

HOSTILE = Path(__file__).parent / "hostile"


def _exec(capsys, data_root, *args):
    code = main(["exec", "sandbox-canary", *args, "--tasks-dir", str(CANARY_TASK), "--data-dir", str(data_root)])
    return code, capsys.readouterr()


def test_exec_json_has_result_and_grade(capsys, data_root):
    code, out = _exec(capsys, data_root, str(HOSTILE / "valid_solution.py"), "--json", "--isolation", "none")
    data = json.loads(out.out)
    assert code == 0 and set(data) == {"result", "grade"}
    assert data["result"]["returncode"] == 0 and data["grade"]["valid_submission"]
    assert data["result"]["isolation"] == "none" and data["result"]["warnings"]


def test_exec_without_submission_and_with_timeout(capsys, data_root):
    code, out = _exec(capsys, data_root, str(HOSTILE / "sleep_forever.py"), "--timeout", "1", "--json",
                      "--isolation", "none")
    data = json.loads(out.out)
    assert code == 1 and data["grade"] is None and data["result"]["killed_by"] == "timeout"


def test_exec_tables(capsys, data_root):
    code, out = _exec(capsys, data_root, str(HOSTILE / "fake_metric.py"), "--isolation", "none")
    assert code == 0
    assert "Final score" in out.out and "nothing to grade" in out.out and "UNISOLATED" in out.err


def test_exec_missing_script(capsys, data_root, tmp_path):
    code, out = _exec(capsys, data_root, str(tmp_path / "nope.py"))
    assert code == 2 and "no script" in out.err


def test_exec_through_the_pool_and_the_cache(capsys, data_root, tmp_path):
    cache = tmp_path / "results.sqlite"
    args = [str(HOSTILE / "valid_solution.py"), "--json", "--executor", "pool", "--isolation", "none",
            "--cache", str(cache)]
    first = json.loads(_exec(capsys, data_root, *args)[1].out)
    code, out = _exec(capsys, data_root, *args)
    second = json.loads(out.out)
    assert code == 0 and not first["result"]["cached"] and second["result"]["cached"]
    assert second["grade"]["score"] == first["grade"]["score"] and second["grade"]["valid_submission"]


def test_exec_rejects_an_unknown_executor(capsys, data_root):
    with pytest.raises(SystemExit):
        _exec(capsys, data_root, str(HOSTILE / "valid_solution.py"), "--executor", "nope")


def test_exec_text_mode_shows_a_scripts_output_without_terminal_control(capsys, data_root, tmp_path):
    script = tmp_path / "escapes.py"
    script.write_text(
        "import sys\n"
        "print('before\\x1b[2J\\x1b]0;retitled\\x07\\x1b[31m[/x] after\\r\\x9b')\n"
        "sys.stderr.write('err\\x1b[1A[bold]line\\n')\n"
    )
    code, out = _exec(capsys, data_root, str(script), "--isolation", "none")
    assert code == 0
    assert "\x1b" not in out.out and "\x9b" not in out.out and "\r" not in out.out
    assert "before[/x] after" in out.out and "err[bold]line" in out.out
