"""Running a GRPO group: `run_batch` and `run_many` for any backend with a `run` method.

Runs go on a bounded pool of threads; cancelling the caller (or one run failing)
cancels every run still going.
"""

from __future__ import annotations

import asyncio
import functools
import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

from mleforge.sandbox.limits import RunLimits
from mleforge.sandbox.result import ExecutionResult
from mleforge.tasks.spec import Limits
from mleforge.tasks.task import Task

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
