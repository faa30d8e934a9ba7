"""The processes of a multi-process run (`accelerate launch --num_processes N -m mleforge train`).

Every rank runs the recipe; what each does (docs/guide/distributed.md):

  * the main process (rank 0) alone writes the run directory: config.yaml, run.json, the
    state buffer (the only writer: the others open it to read, `StateBuffer(writer=False)`),
    the set-up (tasks prepared, the step-wise evaluation before, the buffer's seeds, the warm
    start, the recovery to the last checkpoint), each step's feedback, metrics and rollouts,
    the checkpoints' marks, final/ and the report;
  * every rank draws the same states for a step (the sampler is a pure function of the
    buffer's sealed snapshot, the seed and the step), generates and executes its share of
    the step's rollouts (TRL's split) in its own executor, and trains on them.

Two timeouts. The ranks wait for the main process's set-up on a gloo group of their own whose
timeout is `SETUP_TIMEOUT` (torch's defaults, 10 minutes for NCCL and 30 for gloo, are far
shorter than a warm start or an evaluation on a CPU), in CPU sockets rather than a kernel
that holds a GPU. The default group, which TRL's gathers use every step, gets `STEP_TIMEOUT`:
a rank whose rollouts' scripts run long (each up to its task's time limit) keeps the others
waiting in the step's gather of rewards that long. A rank that fails ends the launch: torchrun
(under `accelerate launch`) stops the others.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta
from functools import cache
from typing import Any

SETUP_TIMEOUT = timedelta(days=2)
STEP_TIMEOUT = timedelta(hours=3)


@dataclass(frozen=True)
class Ranks:
    """This process's place in the launch: `index` of `count` processes, `local` of them on
    this machine."""

    index: int = 0
    count: int = 1
    local: int = 1

    @property
    def main(self) -> bool:
        return self.index == 0

    def wait(self) -> None:
        """Return once every rank has called it (at once where there is one process)."""
        if self.count > 1:
            import torch.distributed as dist

            dist.barrier(group=_setup_group())


def process_ranks(device: str) -> Ranks:
    """The ranks of this launch, its process group started (gloo between CPU processes, the
    accelerator's backend between GPU ones): one process where nothing launched several."""
    from accelerate import PartialState

    # The CPU processes of a launch talk over gloo. The timeout is the default group's where this
    # starts it (the first call in the process).
    state = PartialState(cpu=device == "cpu", timeout=STEP_TIMEOUT)
    if state.num_processes == 1:
        return Ranks()
    _setup_group()  # collective: every rank makes it here, in the same order
    local = int(os.environ.get("LOCAL_WORLD_SIZE", state.num_processes))
    return Ranks(state.process_index, state.num_processes, local)


@cache
def _setup_group() -> Any:
    import torch.distributed as dist

    return dist.new_group(backend="gloo", timeout=SETUP_TIMEOUT)
