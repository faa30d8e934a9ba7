"""An executor that a background job can stop: runs refused and cancelled from then on.

A job that runs beside another on one executor (the step-wise evaluation beside the expert's
collection) must be stoppable when the other fails, so that the shared executor can close
with none of its runs going.
"""

from __future__ import annotations

import threading
from typing import Any


class ExecutorStopped(Exception):
    """A run was cancelled, or refused, because the job that owns the executor is ending."""


class StoppableExecutor:
    """An executor as a background job sees it: after `stop()` no run starts (each raises
    ExecutorStopped) and the runs going are cancelled (killed_by "cancelled": never cached)
    and raise too, so nothing of them is recorded; `stop` returns once none is going, so the
    caller may close the executor underneath. Runs go through `run` (what run_step calls);
    everything else is the inner executor's."""

    def __init__(self, inner: Any):
        self._inner = inner
        self._idle = threading.Condition()  # its lock guards _going and _stopped
        self._going: set[threading.Event] = set()
        self._stopped = False

    def run(self, script: str, task: Any, limits: Any = None, *, keep: bool = False,
            cancel: threading.Event | None = None) -> Any:
        event = cancel if cancel is not None else threading.Event()
        with self._idle:
            if self._stopped:
                raise ExecutorStopped("the job is ending; this run was not started")
            self._going.add(event)
        try:
            result = self._inner.run(script, task, limits, keep=keep, cancel=event)
        finally:
            with self._idle:
                self._going.discard(event)
                self._idle.notify_all()
        if self._stopped:
            self._inner.discard(result)
            raise ExecutorStopped("the job is ending; this run was cancelled")
        return result

    def stop(self, timeout: float | None = None) -> bool:
        """Refuse new runs, cancel the ones going and wait (up to `timeout` s) until none is;
        whether none is."""
        with self._idle:
            self._stopped = True
            for event in self._going:
                event.set()
            return self._idle.wait_for(lambda: not self._going, timeout=timeout)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)
