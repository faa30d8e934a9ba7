"""Processes the curriculum tests start: a trace-feedback stream (killed by the crash
test), concurrent writers and readers, and sampling "ranks".

Run as a script (`python workers.py COMMAND ...`); it imports only mleforge, so
it needs nothing from the test package. Everything it writes is a
deterministic function of the buffer's sealed content and the step number.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

from mleforge.agent.execution import ExecutionSummary
from mleforge.agent.state import State
from mleforge.curriculum.buffer import StateBuffer
from mleforge.curriculum.config import BufferConfig, LearnabilityConfig, SamplerConfig
from mleforge.curriculum.feedback import step_feedback
from mleforge.curriculum.records import SETUP_STEP, Offer, RolloutRecord, TaskReference
from mleforge.curriculum.sampler import make_sampler, next_batch
from mleforge.reward import compute_reward

TASKS = ("alpha", "beta", "gamma")
STREAM_CONFIG = BufferConfig(max_states_per_task=8, max_states=20, retain_evicted_steps=2)
STREAM_LP = LearnabilityConfig(group_size=2)  # the stream's GRPO groups are pairs
OK = ExecutionSummary(0, False, None, 1.0, "done\n", "", True)
CRASH = ExecutionSummary(1, False, None, 1.0, "", "Traceback: KeyError 'x'\n", False)


def open_stream(path: str) -> StateBuffer:
    """Open (or create) the stream's buffer; seed and seal the set-up step if not done yet
    (one transaction: a kill leaves all of it or none; a restart finds it done)."""
    buffer = StateBuffer(path, STREAM_CONFIG, STREAM_LP)
    buffer.set_up([TaskReference(task, "higher", top=1.0, baseline=0.5) for task in TASKS],
                  [State.draft(task, direction="higher") for task in TASKS])
    return buffer


def stream_step(buffer: StateBuffer, step: int):
    """Sample step `step`, make up its rollouts from (step, index) alone, feed them back."""
    sampler = make_sampler(SamplerConfig(group_size=2, seed=7), buffer.learnability)
    _, states = next_batch(buffer, sampler, step, n_groups=2)
    rng = np.random.default_rng(step)
    completions, executions, rewards = [], [], []
    for i, _state in enumerate(states):
        kind = rng.integers(3)
        completions.append(f"try {step}.{i}\n```python\nprint({step * 100 + i})\n```")
        if kind == 0:
            executions.append(None)
            rewards.append(compute_reward("format_error"))
        elif kind == 1:
            executions.append(CRASH)
            rewards.append(compute_reward("execution_error"))
        else:
            executions.append(OK)
            score = 0.5 + 0.05 * int(rng.integers(10))
            rewards.append(compute_reward("valid", score=score, reference=0.5, scale=0.25))
    return step_feedback(buffer, step, states, completions, executions, rewards, clock=lambda: 0.0)


def cmd_stream(path: str, max_steps: str) -> None:
    buffer = open_stream(path)
    print("ready", flush=True)
    step = buffer.sealed_step + 1
    while step < int(max_steps):
        stream_step(buffer, step)
        print(f"committed {step}", flush=True)  # only after the commit returned
        step += 1
    print("done", flush=True)


def cmd_sample(path: str, step: str, n_groups: str) -> None:
    buffer = StateBuffer(path, create=False)
    # the group size the buffer's LP was made for, as a trainer resuming a run reads it
    sampler = make_sampler(SamplerConfig(group_size=buffer.learnability.group_size, seed=11), buffer.learnability)
    batch, states = next_batch(buffer, sampler, int(step), int(n_groups))
    print(json.dumps({"groups": batch.groups, "ids": [s.state_id for s in states]}))


def cmd_hammer(path: str, worker: str, n: str, start_at: str) -> None:
    """Concurrent writer: n times, count 3 rollouts of the shared seeds and offer a new state."""
    buffer = StateBuffer(path)
    seeds = sorted(r["state_id"] for r in buffer.rows() if r["is_seed"])
    while time.time() < float(start_at):  # start together, to overlap
        time.sleep(0.001)
    for i in range(int(n)):
        records = [
            RolloutRecord(seeds[(i + k) % len(seeds)], reward=0.25 * (k + 1), success=k == 2,
                          outcome="valid" if k else "execution_error", score=0.5 + k if k else None,
                          rollout_id=f"w{worker}-{i}-{k}")
            for k in range(3)
        ]
        buffer.record(records, step=0)
        buffer.offer([Offer(State.draft("alpha", ideas=(f"w{worker} i{i}",)), rollout_id=f"w{worker}-{i}")], step=0)
    print("done", flush=True)


def cmd_snap(path: str, stop_file: str) -> None:
    """Concurrent reader: the snapshot of step -1 must never change while writers write
    step 0. Reads until `stop_file` exists (the writers are done), then once more."""
    buffer = StateBuffer(path, create=False)
    first = buffer.snapshot(SETUP_STEP)
    reads, stopping = 0, False
    while not stopping:
        stopping = Path(stop_file).exists()
        if buffer.snapshot(SETUP_STEP) != first:
            print("changed", flush=True)
            sys.exit(1)
        reads += 1
    print(json.dumps({"reads": reads}), flush=True)


if __name__ == "__main__":
    {"stream": cmd_stream, "sample": cmd_sample, "hammer": cmd_hammer, "snap": cmd_snap}[sys.argv[1]](*sys.argv[2:])
