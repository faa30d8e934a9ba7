"""The Executor protocol: what every sandbox backend offers.

A backend runs one script in a fresh workspace of a task under limits and
returns an ExecutionResult; grading happens afterwards, in the caller's
process, from `result.submission_path`. `run_batch` runs a GRPO group
concurrently with a bounded number of workers (batch.py has the shared
implementation; factory.py builds a backend by name).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from mleforge.sandbox.limits import RunLimits
from mleforge.sandbox.result import ExecutionResult
from mleforge.tasks.spec import Limits
from mleforge.tasks.task import Task


@runtime_checkable
class Executor(Protocol):
    name: str

    def run(
        self,
        script: str,
        task: Task,
        limits: RunLimits | Limits | None = None,
        *,
        keep: bool = False,
        cancel: threading.Event | None = None,
    ) -> ExecutionResult:
        """Run one script; `limits` default to the task's; `keep` keeps the workspace;
        setting `cancel` ends the run early (killed_by="cancelled")."""
        ...

    async def run_batch(
        self,
        scripts: Sequence[str],
        task: Task,
        limits: RunLimits | Limits | None = None,
        *,
        max_workers: int | None = None,
        keep: bool = False,
    ) -> list[ExecutionResult]:
        """All scripts, at most `max_workers` at a time; results in the scripts' order."""
        ...

    def run_many(
        self,
        scripts: Sequence[str],
        task: Task,
        limits: RunLimits | Limits | None = None,
        *,
        max_workers: int | None = None,
        keep: bool = False,
    ) -> list[ExecutionResult]:
        """The synchronous form of run_batch."""
        ...

    def discard(self, result: ExecutionResult) -> None:
        """Free a result's submission file once it has been graded."""
        ...

    def close(self) -> None:
        """Free what the executor holds (its workspaces folder, submissions, workers)."""
        ...
