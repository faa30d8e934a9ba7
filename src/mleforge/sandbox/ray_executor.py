"""The Ray executor: each run is one Ray task that runs the local executor on the node Ray picks.

    driver (this process)                               a worker on some node
    public data as a tar ─ray.put (once per checksum)─> unpacked once per node (verified)
    task.options(num_cpus, memory, max_retries=0) ────> LocalExecutor.run_public(): bwrap,
    wait for "started" (queueing does not count)        supervisor, limits, cleanup: all as local
    deadline = timeout + grace + slack: ray.cancel(force=True)   yields the result and the
    submission bytes ─> written in our own folder                 submission's bytes

Isolation, limits and the outcome of a run are the local executor's, on the
node: only the public data ever leaves this machine (never the private
answers), and grading happens here. The node's own timeout ends a run; the
driver's forced cancellation (which kills the worker process, and with it the
run: bwrap dies with its parent) is the backstop for a stuck node, because a
Ray `get` timeout alone stops nothing. Such a run, and a cancelled one, comes
back without output (killed_by "timeout" or "cancelled", and a warning).

Tasks run with `max_retries=0`: a script is never run twice behind our back.
A kept workspace (`keep=True`) stays on the node; `result.workspace` is its
path there.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import hashlib
import io
import os
import secrets
import shutil
import sys
import tarfile
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from mleforge.errors import MissingExtra, SandboxError
from mleforge.sandbox.batch import BatchRuns
from mleforge.sandbox.isolation import requested_isolation, require_hidden
from mleforge.sandbox.limits import MIB, RunLimits
from mleforge.sandbox.result import ExecutionResult
from mleforge.sandbox.workspace import SUBMISSION_NAME, Session, remove_tree
from mleforge.tasks.preparation import require_prepared
from mleforge.tasks.spec import DataSource, Limits
from mleforge.tasks.task import Task

NODE_SLACK_S = 60.0  # beyond timeout + grace: workspace set-up and clean-up, the result's transfer
CANCEL_GRACE_S = 10.0  # a polite cancel (KeyboardInterrupt in the task) before a forced one
POLL_S = 0.1
DATA_ENV = "MLEFORGE_RAY_DATA"  # where nodes keep unpacked task data


def _ray():
    try:
        import ray
    except ImportError as exc:
        raise MissingExtra("ray", "ray", "the Ray executor") from exc
    return ray


class RayExecutor(BatchRuns):
    """Runs scripts as Ray tasks. `address`: the cluster (None: the one this process is
    connected to, else a new local one); `isolation`: the local executor's, on each node;
    `base_dir`: the workspaces folder on the nodes and here; `init_options`: for ray.init."""

    name = "ray"

    def __init__(
        self,
        address: str | None = None,
        *,
        isolation: str | None = None,
        base_dir: str | Path | None = None,
        max_workers: int | None = None,
        init_options: dict[str, Any] | None = None,
    ):
        self.address = address
        # Decided here, not on the nodes: $MLEFORGE_ISOLATION of the driver is what the
        # user set; a node refuses to run (fail closed) where bwrap does not work.
        self.requested = requested_isolation(isolation)
        self.base_dir = str(base_dir) if base_dir else None
        self.max_workers = max_workers
        self.init_options = dict(init_options or {})
        self._data: dict[str, Any] = {}  # public data checksum -> ObjectRef of its tar
        self._session: Session | None = None
        self._isolation: str | None = None
        self._lock = threading.Lock()

    # -- the Executor protocol ------------------------------------------------------

    def run(
        self,
        script: str,
        task: Task,
        limits: RunLimits | Limits | None = None,
        *,
        keep: bool = False,
        cancel: threading.Event | None = None,
    ) -> ExecutionResult:
        require_prepared(task)
        limits = RunLimits.of(limits, task.spec.limits)
        if self.requested != "none":
            # The nodes see only a copy of the public data, unless they share this file
            # system: then a data root in a folder every sandbox binds would be visible.
            from mleforge.sandbox.interpreter import python_roots

            require_hidden(task, python_roots(sys.executable))
        ray = self._connect()
        data_key, data_ref = self._data_ref(task)
        remote = _remote_run().options(**task_options(limits))
        from mleforge.grading.submission import submission_byte_limit

        # The submission comes back through the object store only up to what the grader reads.
        max_bytes = submission_byte_limit(task.answers_path.stat().st_size)
        stream = remote.remote(script, task.id, data_key, [data_ref], limits.to_dict(), self.requested,
                               self.base_dir, keep, max_bytes, [s.to_dict() for s in task.spec.sources])
        submitted = time.monotonic()
        try:
            if self._next(ray, stream, None, cancel) is None:  # queued until then: not counted
                return self._lost(script, task.id, limits, "cancelled", submitted)
            started = time.monotonic()
            done = self._next(ray, stream, started + self._deadline_s(limits), cancel)
            if done is None:
                why = "cancelled" if cancel is not None and cancel.is_set() else "timeout"
                return self._lost(script, task.id, limits, why, started)
            # To the end of the stream: until then the task keeps its CPUs and memory.
            for _ in stream:
                pass
        except BaseException:
            ray.cancel(stream, force=True)
            raise
        return self._land(ExecutionResult.from_dict(done["result"]), done["submission"])

    def discard(self, result: ExecutionResult) -> None:
        if result.submission_path and self._session is not None:
            path = Path(result.submission_path)
            if path.parent.parent == self._session.path / "submissions":
                remove_tree(path.parent)

    def close(self) -> None:
        with self._lock:
            self._data.clear()  # drops our references: the object store may free the tars
            if self._session is not None:
                self._session.close()
                self._session = None

    def __enter__(self) -> RayExecutor:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def isolation(self) -> str:
        """The isolation the nodes' local executors run with (asked of one node, once)."""
        if self._isolation is None:
            ray = self._connect()
            probe = ray.remote(_node_isolation).options(num_cpus=0, max_retries=0)
            self._isolation = ray.get(probe.remote(self.requested, self.base_dir))
        return self._isolation

    @property
    def workspaces_dir(self) -> Path:
        """This process's folder (submissions brought back from the nodes)."""
        return self._get_session().path

    # -- the driver's side ------------------------------------------------------------

    def _connect(self):
        ray = _ray()
        if not ray.is_initialized():
            ray.init(address=self.address, **self.init_options)
        return ray

    def _deadline_s(self, limits: RunLimits) -> float:
        return limits.timeout_s + limits.kill_grace_s + NODE_SLACK_S

    def _next(self, ray, stream, deadline: float | None, cancel: threading.Event | None) -> dict | None:
        """The stream's next item; None if the deadline passed or `cancel` was set (the
        task is then cancelled, politely first, then by force)."""
        while True:
            ready, _ = ray.wait([stream], timeout=POLL_S)
            if ready:
                try:
                    return ray.get(next(stream))
                except StopIteration as exc:
                    raise SandboxError("the Ray task ended without a result") from exc
                except ray.exceptions.RayError as exc:
                    raise SandboxError(f"the Ray task failed: {exc}") from exc
            if cancel is not None and cancel.is_set():
                ray.cancel(stream, force=False)  # KeyboardInterrupt there: the local executor cleans up
                wait_until = time.monotonic() + CANCEL_GRACE_S
                while time.monotonic() < wait_until and not ray.wait([stream], timeout=POLL_S)[0]:
                    pass
                ray.cancel(stream, force=True)
                return None
            if deadline is not None and time.monotonic() >= deadline:
                ray.cancel(stream, force=True)
                return None

    def _data_ref(self, task: Task) -> tuple[str, Any]:
        from mleforge.sandbox.caching_executor import public_checksum

        key = public_checksum(task)
        with self._lock:
            if key not in self._data:
                self._data[key] = _ray().put(_tar(task.public_dir))
            return key, self._data[key]

    def _workers(self, max_workers: int | None, task: Task, limits) -> int:
        if max_workers or self.max_workers:
            return max_workers or self.max_workers
        cpus = int(self._connect().cluster_resources().get("CPU", 1))
        return max(1, cpus // RunLimits.of(limits, task.spec.limits).cpus)

    def _get_session(self) -> Session:
        with self._lock:
            if self._session is None:
                self._session = Session(Path(self.base_dir) if self.base_dir else None)
            return self._session

    def _land(self, result: ExecutionResult, submission: bytes | None) -> ExecutionResult:
        """The node's result, its submission written here (the node's copy is gone)."""
        path = None
        if submission is not None:
            folder = self._get_session().path / "submissions" / result.run_id
            folder.mkdir(mode=0o700)
            path = folder / SUBMISSION_NAME
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with open(fd, "wb") as f:
                f.write(submission)
        return ExecutionResult.from_dict({**result.to_dict(), "submission_path": str(path) if path else None})

    def _lost(self, script: str, task_id: str, limits: RunLimits, why: str, since: float) -> ExecutionResult:
        """A run whose task was cancelled: nothing came back from the node."""
        warning = (
            f"the Ray task was cancelled (ray.cancel force=True) after {time.monotonic() - since:.1f} s"
            + (" without a result from the node (timeout + grace + slack)" if why == "timeout" else "")
            + "; its output is lost"
        )
        return ExecutionResult(
            run_id=secrets.token_hex(8), task_id=task_id, returncode=None, signal=None,
            timed_out=why == "timeout", killed_by=why, wall_s=round(time.monotonic() - since, 4), cpu_s=0.0,
            peak_memory_mb=0.0, stdout="", stderr="", stdout_bytes=0, stderr_bytes=0, submission_path=None,
            isolation=self._isolation or "unknown", warnings=(warning,),
            script_sha256=hashlib.sha256(script.encode("utf-8")).hexdigest(), limits=limits.to_dict(),
        )


def task_options(limits: RunLimits) -> dict[str, Any]:
    """One Ray task per run: the run's CPU share and memory as resources, never retried,
    and a stream of two items (the start, then the result)."""
    return {"num_cpus": limits.cpus, "memory": limits.memory_mb * MIB, "max_retries": 0, "num_returns": "streaming"}


def _tar(folder: Path) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        tar.add(folder, arcname="public")
    return buffer.getvalue()


# -- the node's side (runs in Ray workers) ------------------------------------------------


@functools.lru_cache(maxsize=1)
def _remote_run():
    return _ray().remote(_run_on_node)


def _run_on_node(script, task_id, data_key, data_refs, limits, isolation, base_dir, keep, max_bytes, sources=()):
    """A generator task: first "started" (the driver's clock starts), then the result.
    A submission over `max_bytes` (what the grader would refuse unread) stays behind.
    `sources`: the task's declared ones (DataSource.to_dict()), hidden on the node too."""
    yield {"event": "started", "pid": os.getpid()}
    public = _node_data(data_key, data_refs[0])
    executor = _node_executor(isolation, base_dir)
    declared = tuple(DataSource(s.get("package"), s["path"]) for s in sources)
    result = ran = executor.run_public(script, task_id, public, RunLimits.from_dict(limits), keep=keep,
                                       sources=declared)
    submission = None
    if result.submission_path:
        with open(result.submission_path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            submission = f.read(max_bytes + 1) if size <= max_bytes else b""
        if size > max_bytes or len(submission) > max_bytes:
            submission = None
            result = ExecutionResult.from_dict({
                **result.to_dict(), "submission_path": None,
                "warnings": [*result.warnings, f"the submission ({size} bytes) is over the {max_bytes}-byte "
                             "limit for this task (10x the answers file plus 1 MiB); it was not brought back"],
            })
        if not keep:
            executor.discard(ran)
    yield {"result": result.to_dict(), "submission": submission}


def _node_isolation(isolation: str, base_dir: str | None) -> str:
    return _node_executor(isolation, base_dir).isolation


_executors: dict[tuple, Any] = {}
_executors_lock = threading.Lock()


def _node_executor(isolation: str, base_dir: str | None):
    """One local executor per worker process and setting, closed when the worker exits."""
    from mleforge.sandbox.local import LocalExecutor

    with _executors_lock:
        key = (isolation, base_dir)
        if key not in _executors:
            executor = LocalExecutor(isolation, base_dir=base_dir)
            atexit.register(executor.close)
            _executors[key] = executor
        return _executors[key]


_data_lock = threading.Lock()


def _node_data(key: str, ref) -> Path:
    """The task's public data on this node: unpacked once per checksum, checked against it,
    readable by the sandbox's uids, never written to again."""
    import fcntl

    from mleforge.sandbox.caching_executor import checksum_of_folder

    root = Path(os.environ.get(DATA_ENV) or Path(tempfile.gettempdir()) / f"mleforge-ray-data-{os.getuid()}")
    final = root / key / "public"
    if final.is_dir():
        return final
    root.mkdir(parents=True, exist_ok=True)
    os.chmod(root, 0o755)  # the sandbox's uid must reach the data
    with _data_lock, open(root / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if final.is_dir():
            return final
        staging = Path(tempfile.mkdtemp(prefix=f"{key}.", dir=root))
        try:
            with tarfile.open(fileobj=io.BytesIO(_ray().get(ref)), mode="r") as tar:
                # Our own archive, but never trusted to stay inside `staging`.
                if hasattr(tarfile, "data_filter"):
                    tar.extractall(staging, filter="data")
                else:  # Python < 3.11.4
                    _check_members(tar)
                    tar.extractall(staging)
            unpacked = staging / "public"
            if checksum_of_folder(unpacked) != key:
                raise SandboxError(f"the task data shipped to this node does not match its checksum {key[:12]}")
            for path in [unpacked, *unpacked.rglob("*")]:
                os.chmod(path, 0o555 if path.is_dir() else 0o444)
            os.chmod(staging, 0o755)
            os.replace(staging, root / key)
        finally:
            with contextlib.suppress(FileNotFoundError):
                shutil.rmtree(staging)
    return final


def _check_members(tar: tarfile.TarFile) -> None:
    for member in tar.getmembers():
        parts = Path(member.name).parts
        if member.name.startswith("/") or ".." in parts or not (member.isfile() or member.isdir()):
            raise SandboxError(f"the task data archive holds an unsafe entry: {member.name!r}")
