"""A run SIGKILLed during a step and resumed ends exactly like an uninterrupted run of the same
seed: the same buffer rows, the same metrics, the same rollouts, the same weights."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("trl")

from mleforge.train.config import ModelConfig, TrainConfig  # noqa: E402
from mleforge.train.records import VOLATILE_FIELDS  # noqa: E402
from tests.train.run_train import HELD, HOLD  # noqa: E402
from tests.waiting import wait_for  # noqa: E402

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


def test_a_run_killed_mid_step_and_resumed_equals_the_uninterrupted_run(tiny, titanic, journals, tmp_path):
    from safetensors.torch import load_file

    config = TrainConfig(
        model=ModelConfig(spec=f"hf:{tiny}", gradient_checkpointing=False), tasks="titanic", eval_tasks="",
        steps=3, group_size=2, groups_per_step=2, micro_batch=2, max_new_tokens=8, sft="none",
        journals=str(journals), executor="local", generation="sampled-test", stepwise_eval=False, lr=5e-3,
        sampler="learnability", seed=5,
    )
    config_file = tmp_path / "config.json"
    config_file.write_text(json.dumps(config.to_dict()))
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
    assert not (killed / "checkpoints" / "checkpoint-2" / "mleforge_checkpoint.json").exists()
    assert (killed / "checkpoints" / "checkpoint-1" / "mleforge_checkpoint.json").exists()
    (killed / HELD).unlink()
    finish(start(killed, "--resume"), killed)
    finish(first, straight)

    assert buffer_rows(killed) == buffer_rows(straight)
    assert lines(killed / "metrics.jsonl", VOLATILE_FIELDS) == lines(straight / "metrics.jsonl", VOLATILE_FIELDS)
    assert [m["step"] for m in lines(killed / "metrics.jsonl", ())] == [0, 1, 2]
    for step in range(3):
        name = f"rollouts/step-{step}.jsonl"
        assert lines(killed / name, ("cached",)) == lines(straight / name, ("cached",))
    outcomes = {x["outcome"] for s in range(3) for x in lines(straight / f"rollouts/step-{s}.jsonl", ())}
    assert len(outcomes) > 1  # the rollouts really vary (sampled by the model, then executed)
    a, b = (load_file(run / "final" / "adapter_model.safetensors") for run in (killed, straight))
    assert a.keys() == b.keys() and all(bool((a[k] == b[k]).all()) for k in a)
