"""Two CPU processes under `accelerate launch` (gloo) train one run: every rank draws the same
states in the same order and gets its share of the step's rows as TRL splits them, the main
process alone writes the buffer (it counts exactly the rollouts of both ranks), and a launch
SIGKILLed after step 1's feedback resumes with two processes and repeats step 1 exactly."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("trl")
pytest.importorskip("accelerate")

from mleforge.train.config import ModelConfig, TrainConfig  # noqa: E402
from tests.train.crash import ROOT, lines  # noqa: E402
from tests.train.run_train import HELD, HOLD, TRACE  # noqa: E402
from tests.waiting import wait_for  # noqa: E402

GROUPS, GROUP_SIZE, STEPS = 2, 2, 2


def launch(run_dir: Path, *args: str, hold: int | None = None) -> subprocess.Popen:
    """`accelerate launch` of tests/train/run_train.py on two CPU processes, in a session of its own."""
    with socket.socket() as probe:  # a free port for the ranks' rendezvous
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}:{ROOT}", "OMP_NUM_THREADS": "1", TRACE: "1"}
    if hold is not None:
        env[HOLD] = str(hold)
    command = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
               "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
               "--main_process_port", str(port), "-m", "tests.train.run_train", str(run_dir), *args]
    with open(run_dir.parent / f"{run_dir.name}-{len(list(run_dir.parent.glob('*.log')))}.log", "w") as log:
        return subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT,
                                start_new_session=True)


def kill_ranks(run_dir: Path) -> None:
    """SIGKILL every rank of run_train on `run_dir` (torch's launcher starts each in a session of
    its own, so killing the launcher's process group leaves them running), and wait until they are gone."""
    wanted = ["-m", "tests.train.run_train", str(run_dir)]
    for proc in Path("/proc").iterdir():
        try:
            argv = (proc / "cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        if any(argv[i:i + 3] == wanted for i in range(len(argv))):
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(proc.name), signal.SIGKILL)
                assert wait_for(lambda p=proc: _gone(p), timeout_s=30)


def _gone(proc: Path) -> bool:
    """Whether the process of /proc/<pid> `proc` has exited (gone, or a zombie)."""
    try:
        return (proc / "stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def log_of(tmp_path: Path) -> str:
    return "\n".join(p.read_text()[-3000:] for p in sorted(tmp_path.glob("*.log")))


def traces(run_dir: Path) -> dict[int, list[dict]]:
    return {rank: lines(run_dir / f"trace-rank{rank}.jsonl", ()) for rank in (0, 1)}


def check_split(rank0: dict, rank1: dict) -> None:
    """One step on both ranks: the same draw, and TRL's split of its rows (each group's
    GROUP_SIZE rows side by side, the first half of the step on rank 0)."""
    assert rank0["step"] == rank1["step"] and rank0["batch"] == rank1["batch"]
    batch = rank0["batch"]
    assert len(batch) == GROUPS
    expected = [[g, batch[g]] for g in range(GROUPS) for _ in range(GROUP_SIZE)]
    half = len(expected) // 2
    assert rank0["rows"] == expected[:half] and rank1["rows"] == expected[half:]
    assert rank0["writer"] is True and rank1["writer"] is False  # rank 1 reads the buffer only


def test_two_processes_train_one_curriculum_and_resume(tiny, titanic, journals, tmp_path):
    config = TrainConfig(
        model=ModelConfig(spec=f"hf:{tiny}", gradient_checkpointing=False), tasks="titanic", eval_tasks="",
        steps=STEPS, group_size=GROUP_SIZE, groups_per_step=GROUPS, micro_batch=1, max_new_tokens=8,
        warm_start="none", journals=str(journals), sandbox={"executor": "local"},
        generation={"backend": "sampled-test"}, stepwise={"enabled": False}, lr=5e-3,
        sampler={"kind": "learnability"}, seed=5,
    )
    config_file = tmp_path / "config.json"
    config_file.write_text(json.dumps(config.to_dict()))
    run = tmp_path / "run"

    victim = launch(run, str(config_file), hold=1)
    try:
        assert wait_for(lambda: (run / HELD).exists() or victim.poll() is not None, timeout_s=600)
        assert victim.poll() is None, log_of(tmp_path)
    finally:
        if victim.poll() is None:
            os.killpg(victim.pid, signal.SIGKILL)  # the launcher: step 1 fed back, no checkpoint-2
        victim.wait(timeout=60)
        kill_ranks(run)  # each rank leads a session of its own, outside the launcher's group
    (run / HELD).unlink()
    first = traces(run)
    assert [t["step"] for t in first[0]] == [t["step"] for t in first[1]] == [0, 1]
    for rank0, rank1 in zip(first[0], first[1]):
        check_split(rank0, rank1)
    killed_step1 = lines(run / "rollouts" / "step-1.jsonl", ("cached",))

    resumed = launch(run, "--resume")
    assert resumed.wait(timeout=600) == 0, log_of(tmp_path)

    again = traces(run)
    assert [t["step"] for t in again[0]] == [t["step"] for t in again[1]] == [0, 1, 1]  # from checkpoint-1
    check_split(again[0][2], again[1][2])
    assert again[0][2]["batch"] == first[0][1]["batch"]  # the buffer rewound: step 1 draws what it drew
    assert lines(run / "rollouts" / "step-1.jsonl", ("cached",)) == killed_step1  # and samples it alike

    rollouts = [x for s in range(STEPS) for x in lines(run / "rollouts" / f"step-{s}.jsonl", ())]
    assert [(x["step"], x["index"]) for x in rollouts] == [(s, i) for s in range(STEPS) for i in range(4)]
    assert all(x["outcome"] != "lost" for x in rollouts)
    conn = sqlite3.connect(run / "buffer.sqlite")
    events = conn.execute("SELECT step, rollout_id FROM events ORDER BY step, id").fetchall()
    steps = [row[0] for row in conn.execute("SELECT step FROM steps ORDER BY step")]
    conn.close()
    # Only the main process wrote: each gathered rollout of both ranks counted once, step 1's twice-run feedback once.
    assert events == [(x["step"], x["rollout_id"]) for x in rollouts]
    assert steps == [-1, 0, 1]
    assert [m["step"] for m in lines(run / "metrics.jsonl", ())] == [0, 1]
    marks = [json.loads((run / "checkpoints" / f"checkpoint-{k}" / "mleforge_checkpoint.json").read_text())
             for k in (1, 2)]
    assert [(m["global_step"], m["buffer_step"]) for m in marks] == [(1, 0), (2, 1)]
    record = json.loads((run / "run.json").read_text())
    assert record["status"] == "done" and record["steps_done"] == STEPS
    assert (run / "final" / "adapter_model.safetensors").is_file()
