"""The crash test's moves, shared by test_resume.py and test_ct2_rollout.py: start a run in a
process of its own (tests/train/run_train.py), SIGKILL a twin right after step 1's feedback
committed (before its checkpoint), resume it, and read back what the two runs wrote."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

from tests.train.run_train import HELD, HOLD
from tests.waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]
CLOCKS = {"created_at", "sealed_at", "state_json", "row_json"}  # wall clocks (state_json: the nodes' times)


def start(run_dir: Path, *args: str, hold: int | None = None) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}:{ROOT}", "OMP_NUM_THREADS": "1"}
    if hold is not None:
        env[HOLD] = str(hold)
    with open(run_dir.parent / f"{run_dir.name}.log", "w") as log:  # the child keeps its own descriptor
        return subprocess.Popen([sys.executable, "-m", "tests.train.run_train", str(run_dir), *args], env=env,
                                stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)


def finish(proc: subprocess.Popen, run_dir: Path) -> None:
    code = proc.wait(timeout=600)
    assert code == 0, (run_dir.parent / f"{run_dir.name}.log").read_text()[-3000:]


def kill_after_step_one(config: dict, tmp_path: Path) -> tuple[subprocess.Popen, Path, Path]:
    """Start the run of `config` (a TrainConfig's to_dict) twice in tmp_path: `straight` left
    to run, `killed` SIGKILLed once step 1 is fed back, its checkpoint not written (the buffer
    says so: sealed_step 1). (straight's process, straight, killed); resume killed with
    `start(killed, "--resume")`."""
    config_file = tmp_path / "config.json"
    config_file.write_text(json.dumps(config))
    straight, killed = tmp_path / "straight", tmp_path / "killed"
    first = start(straight, str(config_file))
    victim = start(killed, str(config_file), hold=1)
    try:
        assert wait_for(lambda: (killed / HELD).exists() or victim.poll() is not None, timeout_s=600)
        assert victim.poll() is None, (tmp_path / "killed.log").read_text()[-3000:]
        victim.send_signal(signal.SIGKILL)  # step 1 fed back, its checkpoint not written
        victim.wait(timeout=60)
    finally:
        if victim.poll() is None:
            victim.kill()
    conn = sqlite3.connect(killed / "buffer.sqlite")
    assert json.loads(conn.execute("SELECT value FROM meta WHERE key = 'sealed_step'").fetchone()[0]) == 1
    conn.close()
    (killed / HELD).unlink()
    return first, straight, killed


def buffer_rows(run_dir: Path) -> dict:
    conn = sqlite3.connect(run_dir / "buffer.sqlite")
    out = {}
    for table in ("states", "events", "steps", "duplicate_offers", "purged_states"):
        cursor = conn.execute(f"SELECT * FROM {table} ORDER BY 1, 2")
        names = [d[0] for d in cursor.description]
        out[table] = [{k: v for k, v in zip(names, row) if k not in CLOCKS} for row in cursor]
    conn.close()
    return out


def lines(path: Path, drop: tuple[str, ...]) -> list[dict]:
    return [{k: v for k, v in json.loads(x).items() if k not in drop} for x in path.read_text().splitlines()]
