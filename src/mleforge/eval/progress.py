"""Live progress of an evaluation grid with rich: one bar for the grid's runs, one per task
counting its seeds; on an output that is not a terminal (a log file, CI), a plain line
every few seconds instead, since rich draws nothing live there."""

from __future__ import annotations

import threading
import time
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

PLAIN_INTERVAL_S = 5.0


class RichGridProgress:
    """A `GridListener`: the grid's runs done (tasks x seeds), and per task its seeds done
    (a seed's bar share fills step by step) and failed. Use as a context manager."""

    def __init__(self, console: Console | None = None, disable: bool = False, title: str = "evaluation",
                 plain_interval_s: float = PLAIN_INTERVAL_S):
        self.console = console or Console(stderr=True)
        self.progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), console=self.console, disable=disable)
        self.title = title
        self.plain = not disable and not self.console.is_terminal
        self.plain_interval_s = plain_interval_s
        self._lock = threading.Lock()
        self._grid: TaskID | None = None
        self._rows: dict[str, TaskID] = {}
        self._counts: dict[str, dict[str, int]] = {}
        self._seeds = 0
        self._steps = 0
        self._runs = 0
        self._finished = 0
        self._seen: dict[tuple[str, int], int] = {}  # steps of the runs under way
        self._started = time.monotonic()
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None

    def __enter__(self) -> RichGridProgress:
        self.progress.__enter__()
        self._started = time.monotonic()
        if self.plain:
            self._ticker = threading.Thread(target=self._tick, name="mleforge-eval-progress", daemon=True)
            self._ticker.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join()
        self.progress.__exit__(*exc)
        if self._ticker is not None:  # the last word in a log: where the grid ended
            self.console.print(self.status_line(), markup=False, highlight=False)

    def start(self, grid: Sequence[tuple[str, int]], finished: Sequence[tuple[str, int]], steps: int) -> None:
        tasks = list(dict.fromkeys(t for t, _ in grid))
        with self._lock:
            self._seeds = len(grid) // max(1, len(tasks))
            self._steps = max(1, steps)
            self._runs = len(grid)
            done = set(finished)
            self._finished = len(done & set(grid))
            for task_id in tasks:
                resumed = sum((task_id, s) in done for t, s in grid if t == task_id)
                self._counts[task_id] = {"done": resumed, "failed": 0}
        self._grid = self.progress.add_task(f"{self.title}: {len(tasks)} tasks x {self._seeds} seeds (runs)",
                                            total=len(grid), completed=self._finished)
        for task_id in tasks:
            self._rows[task_id] = self.progress.add_task(
                self._label(task_id), total=self._seeds, completed=self._counts[task_id]["done"])

    def _label(self, task_id: str) -> str:
        failed = self._counts[task_id]["failed"]
        return f"  {task_id} (seeds{f', {failed} failed' if failed else ''})"

    def step(self, task_id: str, seed: int, outcome: Any) -> None:
        with self._lock:
            self._seen[(task_id, seed)] = self._seen.get((task_id, seed), 0) + 1
        # One step is 1/steps of a seed; the count shown stays whole seeds finished.
        self.progress.advance(self._rows[task_id], 1 / self._steps)

    def done(self, task_id: str, seed: int, record: RunReport | RunFailure) -> None:
        with self._lock:
            counts = self._counts[task_id]
            counts["done"] += 1
            if isinstance(record, RunFailure):
                counts["failed"] += 1
            self._seen.pop((task_id, seed), None)
            self._finished += 1
            label, completed = self._label(task_id), counts["done"]
        # A run that stopped early (time limit) or resumed mid-way still fills its seed.
        self.progress.update(self._rows[task_id], description=label, completed=completed)
        if self._grid is not None:
            self.progress.advance(self._grid)

    def status_line(self) -> str:
        """One line for a log: runs finished, failures, elapsed time and the runs under way."""
        with self._lock:
            failed = sum(c["failed"] for c in self._counts.values())
            running = ", ".join(f"{t} seed {s} step {n}/{self._steps}" for (t, s), n in sorted(self._seen.items()))
            finished, runs = self._finished, self._runs
        elapsed = time.monotonic() - self._started
        line = f"{self.title}: {finished}/{runs} runs finished"
        if failed:
            line += f" ({failed} failed)"
        line += f", {elapsed:.0f}s"
        return line + (f"; running: {running}" if running else "")

    def _tick(self) -> None:
        while not self._stop.wait(self.plain_interval_s):
            self.console.print(self.status_line(), markup=False, highlight=False)
