"""`mleforge buffer show|export`, run as users and scripts run it: a real process."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from mleforge.curriculum.export import export_buffer
from mleforge.errors import MissingExtra
from tests.curriculum import workers


def run(*args, check=True):
    return subprocess.run([sys.executable, "-m", "mleforge", *args], capture_output=True, text=True, check=check)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("run")
    buffer = workers.open_stream(str(path))
    for step in range(12):
        workers.stream_step(buffer, step)
    buffer.close()
    return path


def test_show_json(run_dir):
    shown = json.loads(run("buffer", "show", str(run_dir), "--json", "--top", "5").stdout)
    assert shown["sealed_step"] == 11 and shown["rollouts"] == 48 and shown["seeds"] == 3
    assert shown["live_states"] == sum(r["states"] for r in shown["by_task_stage"]) <= 20
    assert {r["task_id"] for r in shown["by_task_stage"]} == set(workers.TASKS)
    top = shown["top"]
    assert len(top) == 5 and [t["LP"] for t in top] == sorted((t["LP"] for t in top), reverse=True)
    assert {"p", "q", "L", "U", "H", "LP", "rollouts", "successes", "best_score", "last_rewards"} <= set(top[0])
    growth = shown["growth"]
    assert [g["step"] for g in growth] == list(range(-1, 12))
    assert all(g["rollouts"] == 4 and g["groups"] >= 1 for g in growth[1:])
    assert 0.0 <= growth[-1]["frac_zero_std_groups"] <= 1.0
    by_file = json.loads(run("buffer", "show", str(run_dir / "buffer.sqlite"), "--json").stdout)
    assert by_file["live_states"] == shown["live_states"]


def test_show_tables(run_dir):
    out = run("buffer", "show", str(run_dir), "--steps", "3").stdout
    for title in ("states by task and stage", "learnability potential", "growth over steps (last 3)"):
        assert title in out


def test_export_jsonl_and_parquet(run_dir, tmp_path):
    shown = json.loads(run("buffer", "show", str(run_dir), "--json").stdout)
    out = json.loads(run("buffer", "export", str(run_dir), "--format", "jsonl", "--out",
                         str(tmp_path / "s.jsonl"), "--json").stdout)
    assert out["states"] == shown["live_states"]
    rows = [json.loads(line) for line in (tmp_path / "s.jsonl").read_text().splitlines()]
    assert len(rows) == out["states"]
    assert all(r["extra_info"]["state_id"] == r["state_id"] == r["state"]["state_id"] for r in rows)
    assert "prompt" not in rows[0]  # the trainer renders it

    run("buffer", "export", str(run_dir), "--format", "parquet")
    import pyarrow.parquet as pq

    table = pq.read_table(run_dir / "buffer_states.parquet")
    assert table.num_rows == len(rows)
    first = table.slice(0, 1).to_pylist()[0]
    assert first["extra_info"]["state_id"] == first["state_id"] == rows[0]["state_id"]
    assert json.loads(first["state"]) == rows[0]["state"] and first["data_source"] == "mleforge"


def test_parquet_without_pyarrow_names_the_extra(run_dir, tmp_path, monkeypatch):
    from mleforge.curriculum.buffer import StateBuffer

    monkeypatch.setitem(sys.modules, "pyarrow", None)  # import pyarrow now raises ImportError
    with StateBuffer(run_dir, create=False) as buffer, pytest.raises(MissingExtra, match=r"mleforge\[verl\]"):
        export_buffer(buffer, tmp_path / "x.parquet", "parquet")
    assert not (tmp_path / "x.parquet").exists()


def test_missing_buffer_exits_2(tmp_path):
    out = run("buffer", "show", str(tmp_path / "nowhere"), check=False)
    assert out.returncode == 2 and "no state buffer" in " ".join(out.stderr.split())
    assert not (tmp_path / "nowhere").exists()  # show never creates a buffer
