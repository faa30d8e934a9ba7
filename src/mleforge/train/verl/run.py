"""A verl run directory: the trainer-independent parts of `mleforge train`, without the trainer.

The directory holds the mleforge config (`config.yaml`, a TrainConfig: tasks, group size,
groups per step, sandbox, reward, prompt, buffer, learnability, sampler) and the state buffer
(`buffer.sqlite`). verl's processes (the trainer, its reward workers, the buffer's owner) each
load it by path, so on a cluster it lives on a file system every node mounts.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from mleforge.agent.prompt_text import Messages
from mleforge.agent.state import State
from mleforge.runs import CONFIG_FILE
from mleforge.tasks.task import Task
from mleforge.train.config import TrainConfig, upgrade_train_dict
from mleforge.train.errors import TrainError
from mleforge.utils.atomic import atomic_write

if TYPE_CHECKING:
    from mleforge.tasks.registry import TaskRegistry


@dataclass(frozen=True)
class VerlRun:
    """A run directory, loaded: its config and its training tasks by id."""

    folder: Path
    config: TrainConfig
    tasks: dict[str, Task]

    @classmethod
    def load(cls, folder: str | Path, registry: TaskRegistry | None = None) -> VerlRun:
        from mleforge.tasks.registry import TaskRegistry

        folder = Path(folder).resolve()
        path = folder / CONFIG_FILE
        if not path.is_file():
            raise TrainError(f"{folder} holds no {CONFIG_FILE}; make the run directory first "
                             "(mleforge.train.verl.run.prepare_run, or examples/verl/prepare.py)")
        config = TrainConfig.from_dict(upgrade_train_dict(yaml.safe_load(path.read_text(encoding="utf-8"))))
        return cls(folder, config, training_tasks(config, registry or TaskRegistry()))

    @cached_property
    def _render(self):
        from mleforge.train.prompt_renderer import make_renderer

        return make_renderer(self.config.prompt)

    def task(self, task_id: str) -> Task:
        try:
            return self.tasks[task_id]
        except KeyError:
            raise TrainError(f"a state of task {task_id!r} reached {self.folder}, which trains on "
                             f"{', '.join(sorted(self.tasks))}; start a new run directory for another task set") from None

    def render(self, state: State) -> Messages:
        """The prompt of `state`, as every mleforge trainer renders it (the run's PromptConfig)."""
        return self._render(state, self.task(state.task_id))


def training_tasks(config: TrainConfig, registry: TaskRegistry) -> dict[str, Task]:
    """The tasks `config` trains on, as `mleforge train` selects them (a group such as `lite`
    leaves out the step-wise evaluation's tasks)."""
    tasks = registry.select(config.tasks)
    if config.tasks.strip() in ("lite", "all") and config.eval_tasks.strip():
        held_out = {t.id for t in registry.select(config.eval_tasks)}
        tasks = [t for t in tasks if t.id not in held_out]
    if not tasks:
        raise TrainError(f"tasks {config.tasks!r} selects no task; give lite, all or task ids (mleforge tasks list)")
    return {t.id: t for t in tasks}


def prepare_run(config: TrainConfig, folder: str | Path, registry: TaskRegistry | None = None) -> VerlRun:
    """Make `folder` a verl run directory: write the config, prepare the tasks, set up the
    buffer (each task's draft seed, plus the states of `config.journals`' expert journals).
    A directory made before is loaded as it is (its config must be `config`)."""
    from mleforge.curriculum.buffer import StateBuffer
    from mleforge.curriculum.seeds import set_up_tasks
    from mleforge.expert.episodes import load_journals
    from mleforge.tasks.preparation import prepare
    from mleforge.tasks.registry import TaskRegistry

    registry = registry or TaskRegistry()
    folder = Path(folder).resolve()
    path = folder / CONFIG_FILE
    if path.is_file():
        run = VerlRun.load(folder, registry)
        if run.config != config:
            raise TrainError(f"{folder} was prepared with another config; pass another folder, or its own "
                             f"{CONFIG_FILE}")
    else:
        folder.mkdir(parents=True, exist_ok=True)
        atomic_write(path, yaml.safe_dump(config.to_dict(), sort_keys=False))
        run = VerlRun.load(folder, registry)
    for task in run.tasks.values():
        prepare(task)
    journals = load_journals(config.journals, list(run.tasks)) if config.journals is not None else []
    with StateBuffer(folder, config.buffer, config.learnability) as buffer:
        set_up_tasks(buffer, run.tasks.values(), journals, stages=None if not journals else config.seed_stages)
    return run
