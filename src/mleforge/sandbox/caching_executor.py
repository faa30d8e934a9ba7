"""CachingExecutor: any executor behind the result cache (see result_cache.py for what is cached).

    with CachingExecutor(make_executor("pool"), "~/.cache/mleforge/results.sqlite") as executor:
        results = executor.run_many(group, task)   # identical scripts run once

Identical scripts that arrive together (a GRPO group) run once: the others wait
for that run and read its result. A hit is a new ExecutionResult (its own run
id, `cached=True`) whose submission is a fresh copy of the cached bytes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import secrets
import sys
import tempfile
import threading
from pathlib import Path

from mleforge.sandbox.batch import BatchRuns
from mleforge.sandbox.executor import Executor
from mleforge.sandbox.limits import RunLimits
from mleforge.sandbox.result import ExecutionResult
from mleforge.sandbox.result_cache import CacheKey, ResultCache, cacheable, environment_fingerprint
from mleforge.sandbox.workspace import SUBMISSION_NAME, remove_tree
from mleforge.tasks.preparation import read_manifest, require_prepared, sha256_file
from mleforge.tasks.spec import Limits
from mleforge.tasks.task import Task


class CachingExecutor(BatchRuns):
    """Wraps `inner` (any Executor); `cache` is a ResultCache or the path of its file."""

    def __init__(self, inner: Executor, cache: ResultCache | str | Path, max_mb: float | None = None):
        self.inner = inner
        self.cache = cache if isinstance(cache, ResultCache) else ResultCache(cache, max_mb=max_mb)
        self.name = inner.name
        self.max_workers = getattr(inner, "max_workers", None)
        self.hits = 0
        self.misses = 0
        self._hits_dir: Path | None = None
        self._lock = threading.Lock()
        self._inflight: dict[str, threading.Event] = {}

    @property
    def isolation(self) -> str:
        return self.inner.isolation

    @property
    def workspaces_dir(self) -> Path:
        return self.inner.workspaces_dir

    def key(self, script: str, task: Task, limits: RunLimits) -> CacheKey:
        return CacheKey(
            task_id=task.id, data_checksum=public_checksum(task),
            script_sha256=hashlib.sha256(script.encode("utf-8")).hexdigest(), limits=limits.to_dict(),
            executor=f"{self.inner.name}:{self.inner.isolation}",
            environment=environment_fingerprint(getattr(self.inner, "python", None) or sys.executable),
        )

    def run(
        self,
        script: str,
        task: Task,
        limits: RunLimits | Limits | None = None,
        *,
        keep: bool = False,
        cancel: threading.Event | None = None,
    ) -> ExecutionResult:
        if keep:  # the caller wants a real workspace to look at
            return self.inner.run(script, task, limits, keep=True, cancel=cancel)
        require_prepared(task)
        limits = RunLimits.of(limits, task.spec.limits)
        key = self.key(script, task, limits)
        while True:
            hit = self.cache.get(key)
            if hit is not None:
                with self._lock:
                    self.hits += 1
                return self._materialize(hit)
            with self._lock:
                running = self._inflight.get(key.digest)
                if running is None:
                    self._inflight[key.digest] = threading.Event()
                    self.misses += 1
                    break
            # The same script is running now: its result will be a hit (or, if it is not
            # cacheable, this run goes ahead on the next round).
            while not running.wait(0.1):
                if cancel is not None and cancel.is_set():
                    return self.inner.run(script, task, limits, cancel=cancel)
        try:
            result = self.inner.run(script, task, limits, cancel=cancel)
            if cacheable(result):
                from mleforge.grading.submission import submission_byte_limit

                # A submission the grader would refuse unread is never held in memory here.
                limit = submission_byte_limit(task.answers_path.stat().st_size)
                submission = _read(result.submission_path, limit)
                if submission is not TOO_LARGE:
                    self.cache.put(key, result, submission)
            return result
        finally:
            with self._lock:
                event = self._inflight.pop(key.digest, None)
            if event is not None:
                event.set()

    def discard(self, result: ExecutionResult) -> None:
        if result.cached and result.submission_path and self._hits_dir is not None:
            path = Path(result.submission_path)
            if path.parent.parent == self._hits_dir:
                remove_tree(path.parent)
                return
        self.inner.discard(result)

    def close(self) -> None:
        with self._lock:
            hits_dir, self._hits_dir = self._hits_dir, None
        if hits_dir is not None:
            remove_tree(hits_dir)
        self.inner.close()

    def __enter__(self) -> CachingExecutor:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _materialize(self, hit) -> ExecutionResult:
        run_id = secrets.token_hex(8)
        path = None
        if hit.submission is not None:
            with self._lock:
                if self._hits_dir is None:
                    self._hits_dir = Path(tempfile.mkdtemp(prefix="mleforge-cache-hits-"))
                hits_dir = self._hits_dir
            folder = hits_dir / run_id
            folder.mkdir(mode=0o700)
            path = folder / SUBMISSION_NAME
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with open(fd, "wb") as f:
                f.write(hit.submission)
        return dataclasses.replace(
            hit.result, run_id=run_id, submission_path=str(path) if path else None, workspace=None, cached=True,
        )


TOO_LARGE = b"<too large>"


def _read(path: str | None, limit: int) -> bytes | None:
    """The submission's bytes, None without one, TOO_LARGE past `limit` (not read)."""
    if path is None:
        return None
    with contextlib.suppress(FileNotFoundError), open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size > limit:
            return TOO_LARGE
        data = f.read(limit + 1)
        return TOO_LARGE if len(data) > limit else data
    return None


_public_checksums: dict[tuple, str] = {}


def public_checksum(task: Task) -> str:
    """One sha256 for the task's public data: from the preparation's manifest where
    there is one, else from the files themselves (remembered while they are unchanged)."""
    manifest = read_manifest(task)
    if manifest is None:
        return checksum_of_folder(task.public_dir)
    prefix = "public/"
    return _checksum_of({
        rel[len(prefix):]: meta["sha256"] for rel, meta in manifest["files"].items() if rel.startswith(prefix)
    })


def checksum_of_folder(root: Path) -> str:
    """public_checksum of a folder of files (the same value as from the manifest)."""
    paths = sorted(p for p in root.rglob("*") if p.is_file())
    stamp = (str(root), tuple((str(p), p.stat().st_mtime_ns, p.stat().st_size) for p in paths))
    if stamp not in _public_checksums:
        _public_checksums[stamp] = _checksum_of({str(p.relative_to(root)): sha256_file(p) for p in paths})
    return _public_checksums[stamp]


def _checksum_of(files: dict[str, str]) -> str:
    return hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()
