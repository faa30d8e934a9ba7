"""Live progress of an evaluation grid with rich: one bar for the grid, one per task."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)

from mleforge.eval.records import RunFailure, RunReport


class RichGridProgress:
    """A `GridListener`: the grid's runs done (tasks x seeds), and per task its steps done over
    all seeds with the seeds finished and failed. Use as a context manager."""

    def __init__(self, console: Console | None = None, disable: bool = False, title: str = "evaluation"):
        self.progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), console=console, disable=disable)
        self.title = title
        self._lock = threading.Lock()
        self._grid: TaskID | None = None
        self._rows: dict[str, TaskID] = {}
        self._counts: dict[str, dict[str, int]] = {}
        self._seeds = 0
        self._steps = 0
        self._seen: dict[tuple[str, int], int] = {}

    def __enter__(self) -> RichGridProgress:
        self.progress.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.progress.__exit__(*exc)

    def start(self, grid: Sequence[tuple[str, int]], finished: Sequence[tuple[str, int]], steps: int) -> None:
        tasks = list(dict.fromkeys(t for t, _ in grid))
        self._seeds = len(grid) // max(1, len(tasks))
        self._steps = steps
        self._grid = self.progress.add_task(f"{self.title}: {len(tasks)} tasks x {self._seeds} seeds",
                                            total=len(grid), completed=len(finished))
        done = set(finished)
        for task_id in tasks:
            resumed = sum((task_id, s) in done for t, s in grid if t == task_id)
            self._counts[task_id] = {"done": resumed, "failed": 0}
            self._rows[task_id] = self.progress.add_task(
                self._label(task_id), total=self._seeds * steps, completed=resumed * steps)

    def _label(self, task_id: str) -> str:
        c = self._counts[task_id]
        failed = f", {c['failed']} failed" if c["failed"] else ""
        return f"  {task_id}: {c['done']}/{self._seeds} seeds{failed}"

    def step(self, task_id: str, seed: int, outcome: Any) -> None:
        with self._lock:
            self._seen[(task_id, seed)] = self._seen.get((task_id, seed), 0) + 1
        self.progress.advance(self._rows[task_id])

    def done(self, task_id: str, seed: int, record: RunReport | RunFailure) -> None:
        with self._lock:
            counts = self._counts[task_id]
            counts["done"] += 1
            if isinstance(record, RunFailure):
                counts["failed"] += 1
            label = self._label(task_id)
        # A run that stopped early (time limit) or resumed mid-way still fills its share.
        rest = self._steps - self._seen.pop((task_id, seed), 0)
        self.progress.update(self._rows[task_id], description=label, advance=max(0, rest))
        if self._grid is not None:
            self.progress.advance(self._grid)
