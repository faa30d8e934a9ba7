"""The feed: each training step's prompts, drawn from the state buffer by the curriculum sampler.

TRL's dataloader yields placeholder rows, one per (group, rollout) in TRL's own layout (its
RepeatSampler over `groups_per_step` slots: each slot `group_size` times in a row, the same
order on every rank). When the trainer generates for step t, the feed draws step t's batch
(as `curriculum.sampler.next_batch` does: from the snapshot of step t - 1, sealed by step
t - 1's feedback; the same draw on every rank) and puts group i's state and rendered prompt into the rows of slot i. The
draw happens then, not when the dataloader prefetches, so a growing buffer is read as it
is after the previous step, and the dataloader's length stays fixed (one pass per step).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mleforge.agent.prompt_text import Messages
from mleforge.agent.state import State
from mleforge.curriculum.buffer import StateBuffer
from mleforge.curriculum.sampler import SampledBatch, Sampler
from mleforge.tasks.task import Task
from mleforge.train.errors import TrainError
from mleforge.train.metrics import entropy
from mleforge.train.prompt_renderer import Renderer

PLACEHOLDER: Messages = [{"role": "user", "content": ""}]
WAIT_S = 600.0  # how long a rank waits for the main process to seal the previous step


@dataclass(frozen=True)
class StepBatch:
    """Step `step`'s draw: group i is `states[i]`, prompted with `prompts[i]`."""

    step: int
    sampled: SampledBatch
    states: tuple[State, ...]
    prompts: tuple[Messages, ...]
    sampler_entropy: float

    @property
    def by_id(self) -> dict[str, State]:
        return {s.state_id: s for s in self.states}


def placeholder_rows(groups: int) -> list[dict[str, Any]]:
    """The dataset TRL iterates: one row per slot (TRL repeats each `group_size` times)."""
    return [{"prompt": PLACEHOLDER, "state_id": "", "group": i} for i in range(groups)]


class CurriculumFeed:
    def __init__(self, buffer: StateBuffer, sampler: Sampler, tasks: Mapping[str, Task], render: Renderer,
                 groups: int):
        self.buffer = buffer
        self.sampler = sampler
        self.tasks = dict(tasks)
        self.render = render
        self.groups = groups
        self._batches: dict[int, StepBatch] = {}

    def batch(self, step: int) -> StepBatch:
        """Step `step`'s batch, drawn once and kept until the step after next."""
        if step not in self._batches:
            # next_batch's draw, with the snapshot kept for the sampler's entropy.
            snapshot = self.buffer.snapshot(step - 1, wait_s=WAIT_S)
            sampled = self.sampler.sample(snapshot, step, self.groups)
            states = tuple(self.buffer.get_states(sampled.groups))
            missing = sorted({s.task_id for s in states} - set(self.tasks))
            if missing:
                raise TrainError(f"the buffer holds states of tasks this run does not train on ({', '.join(missing)}); "
                                 "start a new run directory for another task set")
            probabilities = [float(p) for p in self.sampler.probabilities(snapshot)]
            self._batches[step] = StepBatch(
                step, sampled, states, tuple(self.render(s, self.tasks[s.task_id]) for s in states),
                entropy(probabilities),
            )
            for old in [k for k in self._batches if k < step - 1]:
                del self._batches[old]
        return self._batches[step]

    def states(self, step: int) -> dict[str, State]:
        return self.batch(step).by_id

    def rows(self, step: int, inputs: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """TRL's placeholder rows of this rank, filled with step `step`'s states and prompts."""
        batch = self.batch(step)
        out = []
        for row in inputs:
            group = int(row["group"])
            out.append({"prompt": batch.prompts[group], "state_id": batch.states[group].state_id, "group": group})
        return out
