"""The warm pool: every run is a fresh fork of a zygote that has already imported numpy,
pandas and scikit-learn, so no run pays interpreter start-up and those imports.

    parent (this process)                 zygote's sandbox (bwrap: system, interpreter, public data,
                                          workspaces; never the private answers)
    create workspace ─ request + fds ──>  zygote ─fork─> shim: [a user namespace,] new mount/pid/
    watch: output, status, deadline,                     net/ipc/uts namespaces, the run's workspace
           disk, cancel (as local)                       at /workspace, other runs hidden ─fork─>
    take submission, remove workspace                    init (pid 1, gives up every capability)
                                                         ─fork─> supervisor ─> script

Isolation, compared with the local executor under bwrap (same limits, same
supervisor, same result):

- the same: the script sees the system and the interpreter read-only, its own
  workspace at /workspace with the public data read-only, a private /tmp and
  /dev/shm, a new /proc of its own pid namespace, a network namespace with only
  loopback, its own ipc and uts namespaces, no capability, and no_new_privs.
  As root a run has a uid of its own (so RLIMIT_NPROC counts per run and it can
  touch no other run's files); as any other user a user namespace of its own,
  whose one uid is the sandbox user (65534), in which no further user namespace
  can be made (as bwrap's --disable-userns): RLIMIT_NPROC counts per user
  namespace, so per run again, and the other runs' files are out of its mount
  namespace and its processes out of its pid namespace. The private answers are
  never bound into the zygote's sandbox.
  Everything of a run dies with its pid namespace's init, which the executor
  kills through a pidfd; a shim exits only after that.
- different: the script's process is a fork of the zygote, so it holds a copy
  of the zygote's memory (modules, nothing secret: the zygote never sees a
  script, credentials or private data) and inherits its preloaded modules.
  RLIMIT_DATA and RLIMIT_AS are memory_mb (and the address-space limit) *on
  top of* what the zygote already uses (it measures that once it has preloaded;
  `PoolExecutor.zygotes` shows it), so a run gets that much more than under the local
  executor, where the same imports count against memory_mb. peak_memory_mb
  includes the inherited resident set. `random` and numpy's global generator
  are reseeded in each run, and tempfile forgets any folder it cached. A run
  ends as interpreter shutdown would (threads joined, atexit handlers run, the
  script's globals released and output flushed) but without tearing the
  preloaded modules down, which would give back much of the start-up the pool saves
  (see its per-run time in `python benchmarks/sandbox.py`): an object
  kept alive only inside another module is not finalized. One zygote serves one
  task's data (and CPU share, since BLAS thread pools are sized at import): the
  pool keeps up to `max_zygotes` of them.
- unisolated, the pool is a little stricter than the local executor: the shim
  is a subreaper and kills whatever the script left once the supervisor is gone.
- how the namespaces are made: as root the zygote keeps CAP_SYS_ADMIN,
  CAP_NET_ADMIN, CAP_SETUID, CAP_SETGID and CAP_KILL inside its sandbox and every
  run drops them all with its uid change; as any other user the zygote runs in
  bwrap's user namespace with no capability at all, and each run's shim makes a
  user namespace of its own (where it holds the capabilities for the rest), which
  the run's init then gives up entirely (bounding set, ambient set, securebits,
  capset). The shim counts against the run's RLIMIT_NPROC there, so the limit is
  raised by one for it: the script may start as many processes as under a bwrap
  per run. Where bwrap, or a user namespace inside it, does not work, the pool
  refuses to start (auto included) and says why; it runs unisolated only when
  asked for (isolation "none"), with the same loud warning as the local executor.
"""

from __future__ import annotations

import collections
import functools
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from mleforge.errors import ConfigError, SandboxError
from mleforge.sandbox import bwrap as bw
from mleforge.sandbox.batch import BatchRuns
from mleforge.sandbox.env import sandbox_env
from mleforge.sandbox.isolation import Isolation, choose_isolation, requested_isolation
from mleforge.sandbox.launch import (
    Launcher,
    over_disk,
    rlimits,
    run_memory_limit_kb,
    seccomp_fd,
    supervisor_config,
    write_passwd,
)
from mleforge.sandbox.limits import RunLimits
from mleforge.sandbox.pool.client import RUN_ID_SLOT, RunChannel, Zygote, ZygoteGone, zygote_command
from mleforge.sandbox.process import (
    Spawned,
    Watched,
    pid_of_pidfd,
    sweep,
    tree_memory_kb,
    tree_pids,
    watch,
)
from mleforge.sandbox.result import ExecutionResult
from mleforge.sandbox.workspace import Workspace, private_dir
from mleforge.tasks.spec import DataSource, Limits
from mleforge.tasks.task import Task

log = logging.getLogger("mleforge.sandbox")

DEFAULT_PRELOAD = (
    "numpy", "pandas", "scipy", "sklearn", "sklearn.ensemble", "sklearn.linear_model",
    "sklearn.model_selection", "sklearn.metrics", "sklearn.preprocessing",
)
STATUS_FD = 3  # zygote.STATUS_FD
ZYGOTES_DIR = "zygotes"  # in the session folder: the zygotes' logs, passwd and group


class PoolExecutor(BatchRuns):
    """Runs scripts as forks of warm zygotes (see the module docstring); `isolation` as the
    local executor's, and every run's steps around its start are the same (launch.py).

    `preload`: modules every zygote imports (a missing one is skipped). `max_zygotes`:
    how many zygotes (one per task data and CPU share) stay warm at once.
    """

    name = "pool"

    def __init__(
        self,
        isolation: str | None = None,
        *,
        python: str | None = None,
        base_dir: str | Path | None = None,
        max_workers: int | None = None,
        extra_ro_binds: Sequence[str | Path] = (),
        preload: Sequence[str] = DEFAULT_PRELOAD,
        max_zygotes: int = 4,
    ):
        self.launcher = Launcher(
            self.name, requested_isolation(isolation), self._start, self._choose_isolation,
            python=python, base_dir=base_dir, extra_ro_binds=extra_ro_binds,
        )
        self.max_workers = max_workers
        if isinstance(max_zygotes, bool) or not isinstance(max_zygotes, int) or max_zygotes < 1:
            raise ConfigError(f"max_zygotes must be a positive integer; got {max_zygotes!r}")
        self.preload = tuple(preload)
        self.max_zygotes = max_zygotes
        self._zygotes: collections.OrderedDict[tuple, Zygote] = collections.OrderedDict()
        self._zygote_lock = threading.Lock()
        self._started = 0  # zygotes started so far (names their logs)

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
        return self.launcher.run(script, task, limits, keep, cancel)

    def run_public(
        self,
        script: str,
        task_id: str,
        public_dir: Path,
        limits: RunLimits,
        *,
        keep: bool = False,
        cancel: threading.Event | None = None,
        sources: tuple[DataSource, ...] = (),
    ) -> ExecutionResult:
        """`run` with the task's public data given as a folder (as the local executor's)."""
        return self.launcher.run_public(script, task_id, public_dir, limits, keep, cancel, sources)

    def discard(self, result: ExecutionResult) -> None:
        """Delete a run's submission once graded (else it stays until close())."""
        self.launcher.discard(result)

    def close(self) -> None:
        with self._zygote_lock:
            zygotes = list(self._zygotes.values())
            self._zygotes.clear()
        for zygote in zygotes:
            zygote.close()
        self.launcher.close()

    def __enter__(self) -> PoolExecutor:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def zygotes(self) -> list[dict]:
        """What each warm zygote loaded, and its pid (for logs and tests)."""
        with self._zygote_lock:
            return [{**z.ready, "key": z.key, "pid": z.proc.pid, "users": z.users} for z in self._zygotes.values()]

    # -- isolation ------------------------------------------------------------------

    def resolve_isolation(self) -> Isolation:
        """Decide once (probing with a real run through a zygote) and remember."""
        return self.launcher.resolve_isolation()

    @property
    def isolation(self) -> str:
        return self.resolve_isolation().kind

    @property
    def workspaces_dir(self) -> Path:
        """This executor's session folder: one sub-folder per run in progress."""
        return self.launcher.session().path

    def _choose_isolation(self) -> Isolation:
        """As the local executor's, probed with a real run through a zygote: never silently
        unisolated; where it cannot isolate, the error says why (a user namespace inside
        bwrap refused, as any user but root) and that the local executor may still work."""
        try:
            return choose_isolation(self.name, self.launcher.requested, self._probe)
        except SandboxError as exc:
            if os.geteuid() == 0 or not bw.bwrap_candidates():  # nothing the local one has more
                raise
            raise SandboxError(
                f"{exc}. The local executor (--executor local), which needs no user namespace "
                "inside bwrap, may still isolate runs here"
            ) from exc

    def _probe(self, candidate: Isolation) -> tuple[str | None, Isolation]:
        """Probe with a zygote that preloads nothing (no task data: see _start_zygote), then stop it."""
        try:
            return self.launcher.probe(candidate)
        finally:
            self._stop_zygotes(lambda key: key[0] is None)

    # -- zygotes --------------------------------------------------------------------

    def _acquire(self, public_dir: Path | None, limits: RunLimits, isolation: Isolation, masks: tuple[str, ...]) -> Zygote:
        key = _zygote_key(public_dir, limits.cpus, isolation.kind, masks)
        with self._zygote_lock:
            zygote = self._zygotes.get(key)
            if zygote is not None and not zygote.alive():
                log.warning("a warm pool zygote died (exit %s); starting another: %s",
                            zygote.proc.returncode, zygote.log_tail()[-500:])
                del self._zygotes[key]
                zygote.close()
                zygote = None
            if zygote is None:
                self._evict_idle(self.max_zygotes - 1)
                zygote = self._start_zygote(key, public_dir, limits.cpus, isolation, masks)
                self._zygotes[key] = zygote
            self._zygotes.move_to_end(key)
            zygote.users += 1
            return zygote

    def _release(self, zygote: Zygote) -> None:
        with self._zygote_lock:
            zygote.users -= 1

    def _evict_idle(self, keep: int) -> None:
        """Stop the least recently used idle zygotes until at most `keep` remain (a busy
        one is never stopped: its runs would die with it)."""
        for key in list(self._zygotes):
            if len(self._zygotes) <= keep:
                return
            if self._zygotes[key].users == 0:
                self._zygotes.pop(key).close()

    def _stop_zygotes(self, which: Callable[[tuple], bool]) -> None:
        with self._zygote_lock:
            stopping = [self._zygotes.pop(k) for k in list(self._zygotes) if which(k)]
        for zygote in stopping:
            zygote.close()

    def _start_zygote(
        self, key: tuple, public_dir: Path | None, cpus: int, isolation: Isolation, masks: tuple[str, ...]
    ) -> Zygote:
        session = self.launcher.session()
        sandboxed = isolation.kind == "bwrap"
        self._started += 1
        folder = session.path / ZYGOTES_DIR
        folder.mkdir(mode=0o700, exist_ok=True)
        log_path = folder / f"zygote-{self._started}.log"
        command = zygote_command(self.launcher.python)
        filter_fd = None
        if sandboxed:
            private_dir(session.kept_dir)
            passwd, group = bw.passwd_text(bw.SANDBOX_UID, bw.SANDBOX_UID)
            (folder / "passwd").write_text(passwd)
            (folder / "group").write_text(group)
            filter_fd = seccomp_fd(isolation)  # ptrace denied in the zygote and every run it forks
            try:  # Zygote.start closes it; until then it is ours
                plan = bw.ZygotePlan(
                    bwrap=isolation.bwrap or "bwrap", as_root=isolation.as_root, session=session.path,
                    kept=session.kept_dir, public_dir=public_dir, passwd=folder / "passwd", group=folder / "group",
                    ro_binds=self.launcher.ro_binds, seccomp_fd=filter_fd, masks=masks,
                )
                command = [*bw.zygote_args(plan), "--", *command]
            except BaseException:
                if filter_fd is not None:
                    os.close(filter_fd)
                raise
        env = sandbox_env(
            workspace=bw.SANDBOX_WORKSPACE, tmpdir="/tmp" if sandboxed else str(session.path),
            python_bin=os.path.dirname(self.launcher.python), cpus=cpus, run_id=RUN_ID_SLOT,
        )
        config = {
            # The probe's zygote (no task data) needs no warm modules.
            "preload": list(self.preload) if public_dir is not None else [],
            "isolated": sandboxed,
            # Not root: each run makes a user namespace of its own for its namespaces.
            "userns": sandboxed and not isolation.as_root,
            "has_input": public_dir is not None,
            # The run's private /tmp would hide an interpreter or venv under the host's
            # /tmp (a CI clone there): each run binds these again on top of it.
            "tmp_roots": [r for r in self.launcher.ro_binds if r.startswith("/tmp/")] if sandboxed else [],
        }
        zygote = Zygote.start(key, command, env, str(session.path), config, log_path,
                              () if filter_fd is None else (filter_fd,))
        if zygote.ready.get("failed"):
            log.info("the warm pool could not preload %s", ", ".join(zygote.ready["failed"]))
        return zygote

    # -- one run --------------------------------------------------------------------

    def _start(
        self,
        ws: Workspace,
        run_id: str,
        public_dir: Path | None,
        limits: RunLimits,
        isolation: Isolation,
        uid: int | None,
        cancel: threading.Event | None,
        masks: tuple[str, ...] = (),
    ) -> tuple[Watched, float]:
        """launch.Start: a fork of a warm zygote (whose sandbox covers `masks`, and so every
        run it forks), watched until its process tree is gone."""
        sandboxed = isolation.kind == "bwrap"
        if sandboxed:
            write_passwd(ws, uid)
            _tmp_mountpoints(ws.path / "tmp", [r for r in self.launcher.ro_binds if r.startswith("/tmp/")])
        reads, writes = [], []
        for _ in range(3):  # stdout, stderr, status
            r, w = os.pipe()
            reads.append(r)
            writes.append(w)
        zygote = run = None
        try:
            started = time.monotonic()
            try:
                zygote, run = self._spawn(ws, run_id, public_dir, limits, isolation, uid, writes, masks)
            finally:
                for fd in writes:
                    os.close(fd)  # the run holds them now
            watched, cpu = self._watch(run, reads, ws, run_id, limits, sandboxed, started, cancel, zygote.ready)
            if watched.exit_code is None and watched.last("exit") is None and not zygote.alive():
                raise SandboxError(
                    "the warm pool's zygote ended during the run (the pool was closed, or the zygote "
                    "died), and the run with it"
                )
            return watched, cpu
        finally:
            for fd in reads:
                os.close(fd)
            if run is not None:
                run.close()
            if zygote is not None:
                self._release(zygote)

    def _spawn(self, ws, run_id, public_dir, limits, isolation, uid, writes, masks) -> tuple[Zygote, RunChannel]:
        """Ask a zygote for the run; a zygote found dead is replaced once."""
        for attempt in (1, 2):
            zygote = self._acquire(public_dir, limits, isolation, masks)
            try:
                request = self._request(ws, run_id, limits, isolation, uid, zygote.ready)
                return zygote, zygote.spawn(request, tuple(writes))
            except ZygoteGone as exc:
                log.warning("%s; a warm pool zygote died, starting another", exc)
                self._release(zygote)
                self._stop_zygotes(lambda key, gone=zygote: self._zygotes.get(key) is gone)
                if attempt == 2:
                    raise
            except BaseException:
                self._release(zygote)
                raise
        raise AssertionError("unreachable")

    def _request(self, ws, run_id, limits, isolation, uid, ready: dict) -> dict:
        sandboxed = isolation.kind == "bwrap"
        inside = bw.SANDBOX_WORKSPACE if sandboxed else str(ws.path)
        # What the zygote already uses is not the script's: the limits come on top.
        on_top = rlimits(limits)
        extra = {"RLIMIT_DATA": int(ready.get("data_kb", 0)) * 1024, "RLIMIT_AS": int(ready.get("size_kb", 0)) * 1024}
        for entry in on_top:
            if entry[0] in extra and entry[1] >= 0:
                entry[1] += extra[entry[0]]
                entry[2] += extra[entry[0]]
        config = supervisor_config(f"{inside}/script.py", STATUS_FD, limits, isolation, on_top)
        config["warm"] = True  # reseed the random generators the zygote left
        if sandboxed and not isolation.as_root and config["nproc"] is not None:
            config["nproc"] += 1  # the shim is in the run's user namespace too (see the docstring)
        env = sandbox_env(
            workspace=inside, tmpdir="/tmp" if sandboxed else str(ws.path / "tmp"),
            python_bin=os.path.dirname(self.launcher.python), cpus=limits.cpus, run_id=run_id,
        )
        return {
            "run_id": run_id, "where": "kept" if ws.kept else "session", "workspace": str(ws.path),
            "uid": uid, "shm_mb": max(64, limits.memory_mb // 2), "config": config, "env": env,
        }

    def _watch(self, run, reads, ws, run_id, limits, sandboxed, started, cancel, ready) -> tuple[Watched, float]:
        def kill(thorough: bool) -> None:
            run.kill()
            if thorough and not sandboxed:  # as the local executor: by the run id they carry
                sweep(run_id.encode())

        child = pid_of_pidfd(run.child_pidfd)  # the run's init (isolated) or supervisor
        baseline = int(ready.get("rss_kb", 0))  # the zygote's pages every run starts with

        def over_memory() -> bool:
            return child is not None and tree_memory_kb(child, private_shm=sandboxed) > run_memory_limit_kb(
                limits, baseline)

        def pids() -> list[int]:
            return [] if child is None else tree_pids(child)

        spawned = Spawned(reads[0], reads[1], run.exited, run.fileno)
        try:
            watched = watch(spawned, reads[2], limits, started, over_disk=functools.partial(over_disk, ws, limits, pids),
                            kill=kill, cancel=cancel, over_memory=over_memory)
        except BaseException:  # our bug or a KeyboardInterrupt: the run must not outlive it
            kill(True)
            deadline = time.monotonic() + 10
            while not run.exited() and time.monotonic() < deadline:
                time.sleep(0.01)
            raise
        exit_code, cpu = (None, 0.0) if watched.stuck else run.outcome()
        watched.exit_code = exit_code
        return watched, cpu


def _zygote_key(public_dir: Path | None, cpus: int, kind: str, masks: tuple[str, ...] = ()) -> tuple:
    """Data re-prepared in place is a new folder (a new inode): a new zygote binds it. Other
    paths to hide (another task's sources) need another zygote too."""
    if public_dir is None:
        return (None, cpus, kind, masks)
    info = os.stat(public_dir)
    return (os.path.realpath(public_dir), info.st_ino, info.st_mtime_ns, cpus, kind, masks)


def _tmp_mountpoints(run_tmp: Path, roots: list[str]) -> None:
    """Mount points in the run's private /tmp for the roots under the host's /tmp that
    the zygote binds again there; owned by us, traversable by the run's uid."""
    for root in roots:
        target = run_tmp / os.path.relpath(root, "/tmp")
        for folder in reversed([target, *target.parents]):
            if folder == run_tmp or run_tmp not in folder.parents:
                continue
            if os.path.isdir(root) or folder != target:
                folder.mkdir(mode=0o755, exist_ok=True)
                os.chmod(folder, 0o755)
            else:
                folder.touch(mode=0o644, exist_ok=True)
