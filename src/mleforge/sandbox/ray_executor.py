"""The Ray executor: each run is one Ray task that runs the local executor on the node Ray picks.

    driver (this process)                                   a worker on some node (ray_node.py)
    a slot of max_concurrent (callers past it wait here)
    public data as a tar ─ray.put (once per checksum)─────> fetched and unpacked once per node
    task.options(num_cpus, memory, resources,               LocalExecutor.run_public(): bwrap,
                 max_retries=0, retry_exceptions=False) ──> supervisor, limits, cleanup: as local
    wait for "started" (queueing does not count)            yields the result and the
    deadline = timeout + grace + slack: ray.cancel(force)   submission's bytes
    submission bytes ─> written in our own folder

Isolation, limits and the outcome of a run are the local executor's, on the
node: only the public data ever leaves this machine (never the private
answers), and grading happens here.

Back-pressure: at most `max_concurrent` runs are Ray tasks at once; a caller
past that waits in `run` (its cancel event still ends the wait) instead of
queueing tasks in the cluster without bound. Per-node concurrency is Ray's own
resource accounting: a run asks for the task's `cpus` and `memory_mb` (and any
custom `resources`), so a node started with `--num-cpus 16` holds 16 one-CPU
runs at once.

Nothing runs twice behind our back. Tasks go out with `max_retries=0`: Ray then
retries neither a crashed worker, a dead or preempted node, an out-of-memory
kill by its memory monitor (whose own retry budget is zero when max_retries is)
nor a lost object's lineage; `retry_exceptions=False` keeps an exception on the
node from re-running it. A cancelled task is never retried either.

Killing: the node's own timeout ends a run. `cancel` (or a caller's exception)
asks first politely (a KeyboardInterrupt in the task: the local executor kills
the run's process tree and cleans up), then by force; the driver's deadline is
the backstop for a stuck node: `ray.cancel(force=True)` kills the worker, and the
run's processes die with it (bwrap's --die-with-parent, the supervisor's death
signal), because a Ray `get` timeout alone stops nothing.

Failures are named for whose they are: a script's crash, timeout or memory
failure is its ExecutionResult, as on the local executor; a node that died, a
worker that crashed, a run the node never finished, or an error in our code on
the node raises SandboxError (the run is lost to the infrastructure: a trainer
leaves it out instead of scoring it). A cancelled run comes back without output
(killed_by "cancelled"). A kept workspace (`keep=True`) stays on the node;
`result.workspace` is its path there.
"""

from __future__ import annotations

import functools
import hashlib
import os
import secrets
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from mleforge.errors import ConfigError, SandboxError
from mleforge.sandbox.batch import BatchRuns
from mleforge.sandbox.isolation import requested_isolation, require_hidden
from mleforge.sandbox.limits import MIB, RunLimits
from mleforge.sandbox.ray_node import clean_node, node_isolation, ray_module, run_on_node, tar_of
from mleforge.sandbox.result import ExecutionResult
from mleforge.sandbox.workspace import SUBMISSION_NAME, Session, remove_tree
from mleforge.tasks.preparation import require_prepared
from mleforge.tasks.spec import Limits
from mleforge.tasks.task import Task

NODE_SLACK_S = 60.0  # beyond timeout + grace: workspace set-up and clean-up, the result's transfer
CANCEL_GRACE_S = 10.0  # a polite cancel (KeyboardInterrupt in the task) before a forced one
POLL_S = 0.1


class RayExecutor(BatchRuns):
    """Runs scripts as Ray tasks on a cluster.

    `address`: the cluster (None: $RAY_ADDRESS, else the one `ray start` left on this
    machine, else a new local one); `isolation`: the local executor's, on each node;
    `base_dir`: the workspaces folder on the nodes and here (each machine's own disk: a
    session is told dead by its free file lock, which a shared file system may not carry
    between machines); `max_workers`: threads of
    `run_many`/`run_batch`; `max_concurrent`: runs in flight at once (None: the
    cluster's CPUs when first used); `resources`: custom Ray resources each run asks
    for besides its CPUs and memory (e.g. {"sandbox": 1} on nodes started with
    `--resources '{"sandbox": 8}'`: at most 8 runs per node); `scheduling_strategy`:
    Ray's (e.g. "SPREAD"); `check_fit`: refuse a run that no live node could ever
    hold (turn off where an autoscaler adds such nodes); `init_options`: for ray.init.
    """

    name = "ray"

    def __init__(
        self,
        address: str | None = None,
        *,
        isolation: str | None = None,
        base_dir: str | Path | None = None,
        max_workers: int | None = None,
        max_concurrent: int | None = None,
        resources: dict[str, float] | None = None,
        scheduling_strategy: Any = None,
        check_fit: bool = True,
        init_options: dict[str, Any] | None = None,
    ):
        if max_concurrent is not None and max_concurrent < 1:
            raise ConfigError(f"max_concurrent must be >= 1 (or None: the cluster's CPUs); got {max_concurrent}")
        for key, value in (resources or {}).items():
            if key in ("CPU", "GPU", "memory") or not isinstance(value, (int, float)) or value <= 0:
                raise ConfigError(f"resources holds custom Ray resources > 0 (CPUs and memory come from the "
                                  f"task's limits); got {key}={value!r}")
        self.address = address
        # Decided here, not on the nodes: $MLEFORGE_ISOLATION of the driver is what the
        # user set; a node refuses to run (fail closed) where bwrap does not work.
        self.requested = requested_isolation(isolation)
        self.base_dir = str(base_dir) if base_dir else None
        self.max_workers = max_workers
        self.max_concurrent = max_concurrent
        self.resources = dict(resources or {})
        self.scheduling_strategy = scheduling_strategy
        self.check_fit = check_fit
        self.init_options = dict(init_options or {})
        self._data: dict[str, Any] = {}  # public data checksum -> ObjectRef of its tar
        self._session: Session | None = None
        self._isolation: str | None = None
        self._slots: threading.BoundedSemaphore | None = None
        self._limit = 0  # the slots' number, once known
        self._fits: set[tuple] = set()
        self._nodes: dict[str, dict[str, int]] = defaultdict(lambda: {"runs": 0, "data_shipped": 0})
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
        options = task_options(limits, self.resources, self.scheduling_strategy)
        self._require_fit(ray, options)
        waiting = time.monotonic()
        if not self._acquire(cancel):  # back-pressure: no task goes out past max_concurrent
            return self._lost(script, task.id, limits, "cancelled", waiting)
        try:
            return self._submit(ray, script, task, limits, options, keep, cancel)
        finally:
            self._slots.release()

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
        """The isolation the nodes' local executors run with, asked of every live node once:
        a SandboxError naming the nodes where any cannot isolate as asked, or where they differ
        (a node that cannot would refuse every run sent to it, each one lost)."""
        if self._isolation is None:
            found = self.probe_nodes()
            failed = {node: why for node, why in found.items() if why.startswith("error: ")}
            if failed:
                raise SandboxError("these Ray nodes cannot run scripts as asked ("
                                   + "; ".join(f"{node[:12]}: {why[7:]}" for node, why in failed.items()) + ")")
            if len(set(found.values())) > 1:
                raise SandboxError(f"the Ray nodes isolate runs differently: {found}; give them the same set-up")
            self._isolation = next(iter(found.values()))
        return self._isolation

    def probe_nodes(self) -> dict[str, str]:
        """Per live node id: the isolation its local executor resolves to, or "error: why"."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        ray = self._connect()
        probe = ray.remote(node_isolation)
        refs = {
            node["NodeID"]: probe.options(num_cpus=0, max_retries=0, scheduling_strategy=NodeAffinitySchedulingStrategy(
                node["NodeID"], soft=False)).remote(self.requested, self.base_dir)
            for node in ray.nodes() if node.get("Alive")
        }
        found = {}
        for node, ref in refs.items():
            try:
                found[node] = ray.get(ref)
            except ray.exceptions.RayError as exc:
                cause = getattr(exc, "cause", None) or exc  # a RayTaskError carries the node's exception
                found[node] = f"error: {type(cause).__name__}: {str(cause).strip()[:500]}"
        return found

    @property
    def workspaces_dir(self) -> Path:
        """This process's folder (submissions brought back from the nodes)."""
        return self._get_session().path

    @property
    def concurrency(self) -> int:
        """How many runs may be Ray tasks at once (`max_concurrent`, else the cluster's CPUs)."""
        return self._get_slots()[1]

    def node_stats(self) -> dict[str, dict[str, int]]:
        """Per node id: the runs it started for this executor, and how many of them
        fetched the task data (at most one per task data and node)."""
        with self._lock:
            return {node: dict(counts) for node, counts in self._nodes.items()}

    # -- the driver's side ------------------------------------------------------------

    def _connect(self):
        ray = ray_module()
        if not ray.is_initialized():
            ray.init(address=self.address, **self.init_options)
        return ray

    def _submit(self, ray, script, task, limits, options, keep, cancel) -> ExecutionResult:
        from mleforge.grading.submission import submission_byte_limit

        data_key, data_ref = self._data_ref(task)
        # The submission comes back through the object store only up to what the grader reads.
        max_bytes = submission_byte_limit(task.answers_path.stat().st_size)
        stream = _remote_run().options(**options).remote(
            script, task.id, data_key, [data_ref], limits.to_dict(), self.requested, self.base_dir, keep,
            max_bytes, [s.to_dict() for s in task.spec.sources])
        submitted = time.monotonic()
        started = None
        try:
            started = self._next(ray, stream, None, cancel)  # queued until then: not counted
            if started is None:
                return self._lost(script, task.id, limits, "cancelled", submitted)
            since = time.monotonic()
            deadline = self._deadline_s(limits)
            done = self._next(ray, stream, since + deadline, cancel, started["node"])
            if done is None and not (cancel is not None and cancel.is_set()):
                raise SandboxError(
                    f"node {started['node'][:12]} gave no result for run of {task.id} within {deadline:.0f} s "
                    "(timeout + grace + slack; its own timeout should have ended it): the Ray task was "
                    "cancelled by force (its worker killed, and the run's processes with it); the run is lost")
            if done is None:
                return self._lost(script, task.id, limits, "cancelled", since)
            self._count(started["node"], done.get("shipped", False))
            for _ in stream:  # to the end of the stream: until then the task keeps its CPUs and memory
                pass
        except SandboxError:  # the task is gone already: Ray lost it, or we killed it
            raise
        except BaseException:
            self._kill(ray, stream, started["node"] if started else None)
            raise
        return self._land(ExecutionResult.from_dict(done["result"]), done["submission"])

    def _deadline_s(self, limits: RunLimits) -> float:
        return limits.timeout_s + limits.kill_grace_s + NODE_SLACK_S

    def _next(self, ray, stream, deadline: float | None, cancel: threading.Event | None,
              node: str | None = None) -> dict | None:
        """The stream's next item; None if the deadline passed or `cancel` was set (the
        task is then cancelled: politely first on `cancel`, by force in either case)."""
        while True:
            ready, _ = ray.wait([stream], timeout=POLL_S)
            if ready:
                try:
                    return ray.get(next(stream))
                except StopIteration as exc:
                    raise SandboxError("the Ray task ended without a result") from exc
                except ray.exceptions.RayError as exc:
                    raise lost_run(ray, exc) from exc
            if cancel is not None and cancel.is_set():
                ray.cancel(stream, force=False)  # KeyboardInterrupt there: the local executor cleans up
                wait_until = time.monotonic() + CANCEL_GRACE_S
                while time.monotonic() < wait_until and not ray.wait([stream], timeout=POLL_S)[0]:
                    pass
                if not ray.wait([stream], timeout=0)[0]:  # still running: the worker goes
                    self._kill(ray, stream, node)
                return None
            if deadline is not None and time.monotonic() >= deadline:
                self._kill(ray, stream, node)
                return None

    def _kill(self, ray, stream, node: str | None) -> None:
        """Cancel the run's task by force (its worker is killed; a bwrap run's processes die
        with it) and, on its node, sweep what an unisolated run left behind once the worker
        is gone (a task of its own there; nothing waits for it here)."""
        ray.cancel(stream, force=True)
        if node is not None and self.requested == "none":
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

            there = NodeAffinitySchedulingStrategy(node, soft=False)
            ray.remote(clean_node).options(num_cpus=0, max_retries=0, scheduling_strategy=there).remote(self.base_dir)

    def _acquire(self, cancel: threading.Event | None) -> bool:
        """A slot for one run; False if `cancel` was set while waiting for one."""
        slots, _ = self._get_slots()
        while not slots.acquire(timeout=POLL_S):
            if cancel is not None and cancel.is_set():
                return False
        return True

    def _get_slots(self) -> tuple[threading.BoundedSemaphore, int]:
        with self._lock:
            if self._slots is None:
                limit = self.max_concurrent
                if limit is None:  # every run takes at least one CPU: no more could run at once
                    limit = max(1, int(self._connect().cluster_resources().get("CPU", 1)))
                self._slots, self._limit = threading.BoundedSemaphore(limit), limit
            return self._slots, self._limit

    def _require_fit(self, ray, options: dict[str, Any]) -> None:
        """A ConfigError where no live node could ever hold one run (it would wait forever)."""
        need = {"CPU": float(options["num_cpus"]), "memory": float(options["memory"]), **options.get("resources", {})}
        key = tuple(sorted(need.items()))
        if not self.check_fit or key in self._fits:
            return
        nodes = [n.get("Resources", {}) for n in ray.nodes() if n.get("Alive")]
        if not any(all(node.get(k, 0) >= v for k, v in need.items()) for node in nodes):
            offers = "; ".join(describe_resources(node, need) for node in nodes) or "none alive"
            raise ConfigError(
                f"no node of the Ray cluster can hold one run: it needs {describe_resources(need, need)}, "
                f"and the nodes have: {offers}. Lower the task's limits (cpus, memory_mb), start nodes with "
                "more (ray start --num-cpus, --memory, --resources), or pass check_fit=False where an "
                "autoscaler adds such nodes")
        with self._lock:
            self._fits.add(key)

    def _data_ref(self, task: Task) -> tuple[str, Any]:
        from mleforge.sandbox.caching_executor import public_checksum

        key = public_checksum(task)
        with self._lock:
            if key not in self._data:
                self._data[key] = ray_module().put(tar_of(task.public_dir))
            return key, self._data[key]

    def _count(self, node: str, shipped: bool) -> None:
        with self._lock:
            self._nodes[node]["runs"] += 1
            self._nodes[node]["data_shipped"] += int(bool(shipped))

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
        """A run cancelled by its caller: nothing came back from the node."""
        warning = f"the run was cancelled after {time.monotonic() - since:.1f} s; its output is lost"
        return ExecutionResult(
            run_id=secrets.token_hex(8), task_id=task_id, returncode=None, signal=None,
            timed_out=False, killed_by=why, wall_s=round(time.monotonic() - since, 4), cpu_s=0.0,
            peak_memory_mb=0.0, stdout="", stderr="", stdout_bytes=0, stderr_bytes=0, submission_path=None,
            isolation=self._isolation or "unknown", warnings=(warning,),
            script_sha256=hashlib.sha256(script.encode("utf-8")).hexdigest(), limits=limits.to_dict(),
        )


def task_options(limits: RunLimits, resources: dict[str, float] | None = None,
                 scheduling_strategy: Any = None) -> dict[str, Any]:
    """One Ray task per run: the run's CPU share, memory and custom resources as Ray
    resources, never retried (see the module's docstring), and a stream of two items
    (the start, then the result)."""
    options: dict[str, Any] = {
        "num_cpus": limits.cpus, "memory": limits.memory_mb * MIB, "max_retries": 0, "retry_exceptions": False,
        "num_returns": "streaming",
    }
    if resources:
        options["resources"] = dict(resources)
    if scheduling_strategy is not None:
        options["scheduling_strategy"] = scheduling_strategy
    return options


def lost_run(ray, exc: Exception) -> SandboxError:
    """The SandboxError for a run Ray lost: the cluster's failure, never the script's
    (a script's own failures come back as its result)."""
    if isinstance(exc, ray.exceptions.RayTaskError):  # our code on the node raised, around the run
        cause = exc.cause if exc.cause is not None else exc
        return SandboxError(f"the run's Ray task failed on its node: {type(cause).__name__}: {cause}")
    first_line = (str(exc).strip().splitlines() or [""])[0]
    return SandboxError(f"the Ray cluster lost the run ({type(exc).__name__}: {first_line}); it was not "
                        "retried (max_retries=0): an infrastructure failure, not the script's")


def describe_resources(resources: dict[str, float], keys: dict[str, float]) -> str:
    """`resources` as "2 CPU, 4096 MiB memory, sandbox=1", only the `keys` asked about."""
    parts = []
    for key in keys:
        value = resources.get(key, 0)
        parts.append(f"{value / MIB:.0f} MiB memory" if key == "memory" else
                     f"{value:g} CPU" if key == "CPU" else f"{key}={value:g}")
    return ", ".join(parts)


@functools.lru_cache(maxsize=1)
def _remote_run():
    return ray_module().remote(run_on_node)
