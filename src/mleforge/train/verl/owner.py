"""The buffer's one owner: a Ray actor that draws verl's prompts and takes back its rollouts.

verl 0.9 has no prompt-level curriculum hook (it removed `data.sampler.class_path` in May
2026; `trainer.v1.sampler.custom_sampler` only chooses among groups already rolled out), so
the curriculum drives verl through the dataset (`data.custom_cls`): each prompt verl's
dataloader fetches is the owner's next draw. One actor owns the buffer because the buffer
has one writer (mleforge.curriculum.buffer): the trainer's dataloader asks it for rows,
every reward worker reports each scored rollout to it, and it alone writes the SQLite file.

Rounds. The owner draws `groups` states at a time (a round: one verl step's
`data.train_batch_size` prompts) with the run's sampler from the snapshot of the last sealed
step, exactly as `mleforge train`'s feed does (`curriculum.sampler`). Once every rollout of
a fully served round is in (`group_size` a row), or else when verl fetches the first prompt
of the next round (the last round has no next; a lost rollout is never reported), the
reports gathered since the round began are fed back in one transaction
(`curriculum.feedback.step_feedback`: statistics, new debug and improve states, the step
sealed), and only then is the next round drawn. In verl's synchronous
trainer a step's rewards are all in before the next step fetches, so round k is step k;
in its asynchronous modes (or when failed groups are refilled) a late report counts in the
round it arrives in. Each sealed round appends a line to `curriculum.jsonl` in the run dir.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mleforge.agent.state import State
from mleforge.curriculum.buffer import StateBuffer
from mleforge.curriculum.feedback import step_feedback
from mleforge.curriculum.sampler import make_sampler
from mleforge.errors import MissingExtra
from mleforge.paths import DATA_ENV
from mleforge.reward.compute import RewardBreakdown
from mleforge.train.errors import TrainError
from mleforge.train.verl.rows import verl_row
from mleforge.train.verl.run import VerlRun

NAMESPACE = "mleforge"
LOG_FILE = "curriculum.jsonl"


@dataclass(frozen=True)
class RolloutReport:
    """One scored rollout, as a reward worker sends it to the owner."""

    state: State
    completion: str
    execution: Any  # the sandbox's ExecutionResult (None when nothing ran)
    reward: RewardBreakdown
    rollout_id: str
    error: str | None = None


class BufferOwner:
    """Draws rows for verl's dataloader and feeds reported rollouts back to the buffer.

    A plain class (usable in one process); `owner_handle` runs it as the named Ray actor
    that verl's processes share. Its methods run one at a time (a Ray actor's default), and
    a lock keeps them so in a single process too. Its rows name it (`extra_info.owner`) for
    the reward to report to; `name=""` leaves that out (an owner no reward worker reaches,
    whose reports come by `report` in its own process)."""

    def __init__(self, folder: str, groups: int | None = None, name: str | None = None):
        self.run = VerlRun.load(folder)
        config = self.run.config
        self.groups = int(groups or config.groups_per_step)
        self.name = owner_name(self.run.folder) if name is None else name
        self.buffer = StateBuffer(self.run.folder, config.buffer, config.learnability)
        if self.buffer.sealed_step is None:
            raise TrainError(f"the buffer of {self.run.folder} is not set up; run "
                             "mleforge.train.verl.run.prepare_run (examples/verl/prepare.py) first")
        self.sampler = make_sampler(config.sampler, config.learnability)
        self.step: int | None = None  # the round being served (its buffer step)
        self.batch: list[State] = []
        self.position = 0
        self.served = 0
        self.pending: list[RolloutReport] = []
        self._lock = threading.Lock()

    def next_row(self) -> dict[str, Any]:
        """The next prompt verl trains on, as a dataset row (mleforge.train.verl.rows)."""
        with self._lock:
            if self.position >= len(self.batch):
                if self.step is not None:
                    self._seal()
                self._draw()
            state = self.batch[self.position]
            self.position += 1
            self.served += 1
            return verl_row(self.run, state, self.served - 1, owner=self.name or None)

    def report(self, report: RolloutReport) -> None:
        """A scored rollout; it counts when the round is sealed. A round all of whose rows
        were served and all of whose rollouts (`group_size` a row) are in is sealed now: the
        last round of a run is fetched after by nobody, and its feedback would be lost."""
        with self._lock:
            self.pending.append(report)
            served = self.step is not None and self.position >= len(self.batch)
            if served and len(self.pending) >= len(self.batch) * self.run.config.group_size:
                self._seal()
                self.batch, self.position, self.step = [], 0, None

    def seal(self) -> dict[str, Any] | None:
        """Feed back what was reported so far and end the round now (the end of training);
        the summary, or None when no round was drawn."""
        with self._lock:
            if self.step is None:
                return None
            summary = self._seal()
            self.batch, self.position, self.step = [], 0, None
            return summary

    def stats(self) -> dict[str, Any]:
        with self._lock:
            return {"sealed_step": self.buffer.sealed_step, "round_step": self.step, "served": self.served,
                    "pending": len(self.pending), **self.buffer.counts()}

    def close(self) -> None:
        self.buffer.close()

    def _draw(self) -> None:
        step = int(self.buffer.sealed_step) + 1
        sampled = self.sampler.sample(self.buffer.snapshot(step - 1), step, self.groups)
        self.batch, self.position, self.step = self.buffer.get_states(sampled.groups), 0, step

    def _seal(self) -> dict[str, Any]:
        reports, self.pending = self.pending, []
        config = self.run.config
        summary = step_feedback(
            self.buffer, int(self.step), [r.state for r in reports], [r.completion for r in reports],
            [r.execution for r in reports], [r.reward for r in reports],
            rollout_ids=[r.rollout_id for r in reports], errors=[r.error for r in reports],
            offer_states=config.buffer_growth, feedback=config.feedback,
        ).to_dict()
        rewards = [r.reward.total for r in reports]
        line = {**summary, "mean_reward": sum(rewards) / len(rewards) if rewards else None,
                "valid": sum(r.reward.case == "valid" for r in reports), **self.buffer.counts()}
        with open(self.run.folder / LOG_FILE, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(line) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        return line


def owner_name(folder: str | Path) -> str:
    """The actor's name: one owner per run directory in a Ray cluster."""
    digest = hashlib.sha256(str(Path(folder).resolve()).encode()).hexdigest()[:12]
    return f"mleforge-buffer-{digest}"


def require_ray():
    try:
        import ray
    except ImportError:
        raise MissingExtra("ray", "verl", "the curriculum's buffer owner") from None
    if not ray.is_initialized():
        raise TrainError("the buffer's owner is a Ray actor: it is reached from inside verl's Ray job "
                         "(or after ray.init()); Ray is not initialized in this process")
    return ray


def owner_handle(folder: str | Path, groups: int | None = None):
    """The run's owner actor, started on this node if no process started it yet."""
    ray = require_ray()
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    name = owner_name(folder)
    here = ray.get_runtime_context().get_node_id()
    # The owner renders prompts from the prepared tasks: it reads the data root its starter reads.
    env = {DATA_ENV: os.environ[DATA_ENV]} if DATA_ENV in os.environ else {}
    actor = ray.remote(BufferOwner).options(
        name=name, namespace=NAMESPACE, get_if_exists=True, num_cpus=0, max_restarts=0,
        scheduling_strategy=NodeAffinitySchedulingStrategy(here, soft=False),  # beside the trainer's buffer file
        runtime_env={"env_vars": env},
    )
    return actor.remote(str(Path(folder).resolve()), groups, name)


_owners: dict[str, Any] = {}


def find_owner(name: str):
    """The owner named in a row's extra_info, from a reward worker (looked up once per process)."""
    ray = require_ray()
    if name not in _owners:
        try:
            _owners[name] = ray.get_actor(name, namespace=NAMESPACE)
        except ValueError:
            raise TrainError(f"no buffer owner {name!r} in this Ray cluster; the row came from a curriculum "
                             "dataset whose job has ended") from None
    return _owners[name]
