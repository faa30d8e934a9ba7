"""The Executor protocol, the helpers every backend shares, and the factory.

A backend runs one script in a fresh workspace of a task under limits and
returns an ExecutionResult; grading happens afterwards, in the caller's
process, from `result.submission_path`. `run_batch` runs a GRPO group
concurrently with a bounded number of workers.
"""

from __future__ import annotations

import asyncio
import functools
import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol, runtime_checkable

from mleforge.errors import ConfigError
from mleforge.sandbox.limits import RunLimits
from mleforge.sandbox.result import ExecutionResult
from mleforge.tasks.spec import Limits
from mleforge.tasks.task import Task

EXECUTOR_KINDS = ("local", "pool", "ray")


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


RunFn = Callable[..., ExecutionResult]


def default_workers(limits: RunLimits) -> int:
    """As many concurrent runs as this machine has CPU shares of `limits.cpus`."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, cpus // max(1, limits.cpus))


async def gather_runs(
    run: RunFn,
    scripts: Sequence[str],
    task: Task,
    limits: RunLimits | Limits | None,
    max_workers: int,
    keep: bool,
) -> list[ExecutionResult]:
    """Run `run` over the scripts on a pool of threads. Cancelling the awaiting task
    (or one run failing) cancels every run still going, and waits for them to end."""
    loop = asyncio.get_running_loop()
    cancels = [threading.Event() for _ in scripts]
    with ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="mleforge-run") as pool:
        futures = [
            loop.run_in_executor(pool, functools.partial(run, s, task, limits, keep=keep, cancel=c))
            for s, c in zip(scripts, cancels)
        ]
        try:
            return list(await asyncio.gather(*futures))
        except BaseException:
            for cancel in cancels:
                cancel.set()
            await asyncio.gather(*futures, return_exceptions=True)
            raise


def map_runs(
    run: RunFn,
    scripts: Sequence[str],
    task: Task,
    limits: RunLimits | Limits | None,
    max_workers: int,
    keep: bool,
) -> list[ExecutionResult]:
    cancels = [threading.Event() for _ in scripts]
    with ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="mleforge-run") as pool:
        futures = [pool.submit(run, s, task, limits, keep=keep, cancel=c) for s, c in zip(scripts, cancels)]
        try:
            return [f.result() for f in futures]
        except BaseException:
            for cancel in cancels:
                cancel.set()
            raise


class BatchRuns:
    """`run_batch` and `run_many` for a backend with `run` and a `max_workers` attribute;
    a backend with its own notion of capacity (Ray) overrides `_workers`."""

    max_workers: int | None = None

    def _workers(self, max_workers: int | None, task: Task, limits: RunLimits | Limits | None) -> int:
        return max_workers or self.max_workers or default_workers(RunLimits.of(limits, task.spec.limits))

    async def run_batch(
        self,
        scripts: Sequence[str],
        task: Task,
        limits: RunLimits | Limits | None = None,
        *,
        max_workers: int | None = None,
        keep: bool = False,
    ) -> list[ExecutionResult]:
        """All scripts (a GRPO group), at most `max_workers` at a time; results in order."""
        return await gather_runs(self.run, scripts, task, limits, self._workers(max_workers, task, limits), keep)

    def run_many(
        self,
        scripts: Sequence[str],
        task: Task,
        limits: RunLimits | Limits | None = None,
        *,
        max_workers: int | None = None,
        keep: bool = False,
    ) -> list[ExecutionResult]:
        """`run_batch` for callers without an event loop (or inside one)."""
        return map_runs(self.run, scripts, task, limits, self._workers(max_workers, task, limits), keep)


def make_executor(kind: str = "local", **options: Any) -> Executor:
    """An executor by name; `options` go to its constructor (e.g. isolation="bwrap")."""
    if kind == "local":
        from mleforge.sandbox.local import LocalExecutor

        return LocalExecutor(**options)
    if kind == "pool":
        from mleforge.sandbox.pool import PoolExecutor

        return PoolExecutor(**options)
    if kind == "ray":
        from mleforge.sandbox.ray_executor import RayExecutor

        return RayExecutor(**options)
    raise ConfigError(f"unknown executor {kind!r}; available: {', '.join(EXECUTOR_KINDS)}")
