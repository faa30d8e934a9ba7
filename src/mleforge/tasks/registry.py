"""Finding tasks: the built-in suite, folders the user names, and MLE-bench competitions."""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mleforge.errors import TaskNotFound, TaskSpecError
from mleforge.paths import data_root
from mleforge.tasks.mlebench import PREFIX as MLEBENCH_PREFIX
from mleforge.tasks.mlebench import MLEBenchSource
from mleforge.tasks.spec import load_task_spec
from mleforge.tasks.task import Task, local_task

BUILTIN_DIR = Path(__file__).parent / "builtin"
TASKS_ENV = "MLEFORGE_TASKS"  # extra task folders, separated by os.pathsep


def _task_folders(root: Path) -> list[Path]:
    """`root` itself if it is a task folder, else its sub-folders that are."""
    if (root / "task.yaml").is_file():
        return [root]
    return sorted(p.parent for p in root.glob("*/task.yaml"))


@dataclass(frozen=True)
class BrokenTask:
    """A task folder that could not be loaded: listed with its error, usable by no command.

    `name` is the folder's name (a task's id, usually), `error` what is wrong and where."""

    name: str
    folder: Path
    error: str

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "folder": str(self.folder), "error": self.error}


class TaskRegistry:
    """All tasks visible to this process. Task ids are unique across sources.

    One malformed task folder (or one whose id another task already has) does not stop
    the others: it is kept in `broken` with its error, and asking for it by its id (or
    its folder's name) raises that error.
    """

    def __init__(
        self,
        task_dirs: Iterable[str | Path] = (),
        include_builtin: bool = True,
        data_dir: str | Path | None = None,
        mlebench: MLEBenchSource | None | bool = True,
    ):
        self.data_dir = Path(data_dir).resolve() if data_dir else data_root()
        self._tasks: dict[str, Task] = {}
        self._duplicates: dict[str, TaskSpecError] = {}  # ids defined twice: usable by neither
        self._broken_names: dict[str, TaskSpecError] = {}  # folder names of unloadable folders
        self.broken: list[BrokenTask] = []
        if include_builtin:
            self._add_folders(BUILTIN_DIR, "builtin")
        extra = [*task_dirs, *filter(None, os.environ.get(TASKS_ENV, "").split(os.pathsep))]
        for folder in extra:
            folder = Path(folder).expanduser().resolve()
            if not folder.is_dir():
                raise TaskNotFound(f"task folder {folder} does not exist")
            self._add_folders(folder, "folder")
        self.mlebench = MLEBenchSource.discover() if mlebench is True else (mlebench or None)

    def _add_folders(self, root: Path, kind: str) -> None:
        for folder in _task_folders(root):
            try:
                spec = load_task_spec(folder)
                if spec.id in self._tasks:
                    raise TaskSpecError(
                        folder / "task.yaml", "id",
                        f"{spec.id!r} is already defined by {self._tasks[spec.id].spec.folder}; ids must be unique",
                    )
            except TaskSpecError as exc:
                if kind == "builtin":  # a broken built-in task is a bug of the package itself
                    raise
                self.broken.append(BrokenTask(folder.name, folder, str(exc)))
                if exc.key == "id" and "already defined" in exc.problem:
                    self._duplicates[spec.id] = exc
                else:
                    self._broken_names.setdefault(folder.name, exc)
                continue
            self._tasks[spec.id] = local_task(spec, kind, self.data_dir)

    def ids(self, include_mlebench: bool = False) -> list[str]:
        ids = [i for i in self._tasks if i not in self._duplicates]
        if include_mlebench and self.mlebench is not None:
            ids += self.mlebench.ids()
        return ids

    def get(self, task_id: str) -> Task:
        if task_id.startswith(MLEBENCH_PREFIX):
            if self.mlebench is None:
                raise TaskNotFound(
                    f"{task_id}: MLE-bench is not available; install it (pip install 'mleforge[mlebench]') "
                    "or set MLEBENCH_COMPETITIONS_DIR and MLEBENCH_DATA_DIR"
                )
            return self.mlebench.get(task_id)
        if task_id in self._duplicates:
            raise self._duplicates[task_id]
        try:
            return self._tasks[task_id]
        except KeyError:
            if task_id in self._broken_names:
                raise self._broken_names[task_id] from None
            broken = f"; {len(self.broken)} task folder(s) could not be loaded: " + "; ".join(
                b.error for b in self.broken[:3]) if self.broken else ""
            raise TaskNotFound(
                f"no task {task_id!r}; known tasks: {', '.join(self._tasks)} "
                f"(see `mleforge tasks list`; MLE-bench ids start with mlebench:){broken}"
            ) from None

    def tasks(self, include_mlebench: bool = False) -> list[Task]:
        return [self.get(i) for i in self.ids(include_mlebench)]

    def select(self, selector: str) -> list[Task]:
        """`all`, `lite`, or comma-separated ids (MLE-bench ids as `mlebench:<id>`)."""
        if selector == "all":
            return self.tasks()
        if selector == "lite":
            return [t for t in self.tasks() if "lite" in t.spec.tags]
        return [self.get(part.strip()) for part in selector.split(",") if part.strip()]
