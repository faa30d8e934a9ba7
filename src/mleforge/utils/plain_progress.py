"""Progress for an output that is not a terminal (a log file, `nohup`, CI): rich draws its
bars live only on a terminal, and elsewhere prints them once, when they stop, so a log of a
long run would say nothing until its end. `PlainTicker` prints the bars of a rich Progress
as one plain line every few seconds instead (what each counts, done/total, elapsed, ETA and
the figures shown beside it); on a terminal, or with the bars disabled, it does nothing.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from rich.console import Console

PLAIN_INTERVAL_S = 5.0


def clock(seconds: float | None) -> str:
    """H:MM:SS, or -:--:-- when unknown."""
    if seconds is None:
        return "-:--:--"
    whole = int(seconds)
    return f"{whole // 3600}:{whole % 3600 // 60:02d}:{whole % 60:02d}"


class PlainTicker:
    """Prints `progress`'s line on `console` every `interval_s` while started, where the
    console is not a terminal and the progress is not disabled.

    `wait` is its clock: called with the interval, it returns once that much time has passed
    (False) or the ticker is stopped (True). The default waits on the ticker's stop event;
    a test drives the ticker with a clock of its own instead of sleeping."""

    def __init__(self, progress: Any, console: Console, interval_s: float = PLAIN_INTERVAL_S,
                 wait: Callable[[float], bool] | None = None):
        self.progress = progress
        self.console = console
        self.interval_s = interval_s
        self.active = not console.is_terminal and not progress.disable
        self._stop = threading.Event()
        self._wait = wait or self._stop.wait
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self.active and self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._tick, name="mleforge-plain-progress", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def line(self) -> str:
        parts = []
        for task in self.progress.tasks:
            if not task.visible:
                continue
            total = "?" if task.total is None else f"{task.total:.0f}"
            part = f"{task.description}: {task.completed:.0f}/{total}, {clock(task.elapsed)} elapsed"
            if task.total is not None and task.completed < task.total:
                part += f", ETA {clock(task.time_remaining)}"
            figures = str(task.fields.get("figures", "")).strip()
            parts.append(f"{part}  {figures}" if figures else part)
        return "; ".join(parts)

    def _tick(self) -> None:
        while not self._wait(self.interval_s) and not self._stop.is_set():
            text = self.line()
            if text:
                self.console.print(text, markup=False, highlight=False, soft_wrap=True)
