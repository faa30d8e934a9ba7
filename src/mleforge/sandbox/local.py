"""The local executor: every run a fresh process tree on this machine, inside bwrap where it works.

One run (launch.py has the steps around it, the same for the warm pool):

    parent (this process)                      sandbox
    create workspace ── Popen(start_new_session) ─> [bwrap ─>] supervisor ─fork─> script
    watch: stdout/stderr head+tail, status pipe,          sets rlimits, drops uid,
           deadline + grace, disk, cancel                 timeout, wait4, kills leftovers
    take submission/submission.csv out, remove workspace, build the ExecutionResult

Isolation is chosen as isolation.py says: bwrap, or none only when asked for.
Unisolated, the same supervisor runs directly: rlimits, the timeout, the process
group and a subreaper still hold, and leftovers are swept by the run id they
carry in their command line or environment. But the script runs as this user,
sees the whole file system (the private answers included), can reach the
network, and can signal any of this user's processes. Every result of such a
run says so in `warnings`, and the log says it once.
"""

from __future__ import annotations

import functools
import os
import subprocess
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from mleforge.errors import SandboxError
from mleforge.sandbox import bwrap as bw
from mleforge.sandbox.batch import BatchRuns
from mleforge.sandbox.env import sandbox_env
from mleforge.sandbox.interpreter import supervisor_command
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
from mleforge.sandbox.process import Watched, kill_group, sweep, tree_memory_kb, tree_pids, watch
from mleforge.sandbox.result import ExecutionResult
from mleforge.sandbox.workspace import Workspace
from mleforge.tasks.spec import DataSource, Limits
from mleforge.tasks.task import Task


class LocalExecutor(BatchRuns):
    """Runs scripts as local processes. `isolation`: `auto` or `bwrap` (bwrap, the
    system's when it works, else the bundled one; a SandboxError saying why when
    neither works), or `none` (no sandbox, with a loud warning: only for code you
    trust). Not given: $MLEFORGE_ISOLATION, else auto. Model-written code is never
    run unisolated unless asked for.

    Thread-safe: `run` may be called from many threads at once; `run_batch` and
    `run_many` do that with a bounded number of workers.
    """

    name = "local"

    def __init__(
        self,
        isolation: str | None = None,
        *,
        python: str | None = None,
        base_dir: str | Path | None = None,
        max_workers: int | None = None,
        extra_ro_binds: Sequence[str | Path] = (),
    ):
        self.launcher = Launcher(
            self.name, requested_isolation(isolation), self._start, self._choose_isolation,
            python=python, base_dir=base_dir, extra_ro_binds=extra_ro_binds,
        )
        self.max_workers = max_workers

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
        """`run` with the task's public data given as a folder, for callers that hold
        no Task (a Ray node has a copy of the public data, and only of it); `sources`:
        the task's declared ones, hidden with the default set (masks.py)."""
        return self.launcher.run_public(script, task_id, public_dir, limits, keep, cancel, sources)

    def discard(self, result: ExecutionResult) -> None:
        """Delete a run's submission once graded (else it stays until close())."""
        self.launcher.discard(result)

    def close(self) -> None:
        self.launcher.close()

    def __enter__(self) -> LocalExecutor:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- isolation ----------------------------------------------------------------

    def resolve_isolation(self) -> Isolation:
        """Decide once (probing bwrap with a real run) and remember."""
        return self.launcher.resolve_isolation()

    @property
    def isolation(self) -> str:
        return self.resolve_isolation().kind

    @property
    def workspaces_dir(self) -> Path:
        """This executor's session folder: one sub-folder per run in progress."""
        return self.launcher.session().path

    def _choose_isolation(self) -> Isolation:
        return choose_isolation(self.name, self.launcher.requested, self.launcher.probe)

    # -- one run ------------------------------------------------------------------

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
        """launch.Start: a bwrap (or the supervisor directly) per run, watched until its
        process tree is gone."""
        status_r, status_w = os.pipe()
        filter_fd = seccomp_fd(isolation)
        try:
            command, env, cwd = self._command(ws, run_id, public_dir, limits, isolation, uid, status_w, filter_fd,
                                              masks)
        except BaseException:
            for fd in (status_r, status_w, filter_fd):
                if fd is not None:
                    os.close(fd)
            raise
        # From here on _spawn and _watch own (and close) all three.
        passed = (status_w,) if filter_fd is None else (status_w, filter_fd)
        started = time.monotonic()
        proc = _spawn(command, env, cwd, passed, status_r)
        watched = _watch(proc, status_r, ws, run_id, limits, isolation, cancel, started)
        return watched, _reap(proc, watched)

    def _command(
        self,
        ws: Workspace,
        run_id: str,
        public_dir: Path | None,
        limits: RunLimits,
        isolation: Isolation,
        uid: int | None,
        status_fd: int,
        filter_fd: int | None = None,
        masks: tuple[str, ...] = (),
    ) -> tuple[list[str], dict[str, str], str]:
        sandboxed = isolation.kind == "bwrap"
        python = self.launcher.python
        inside = bw.SANDBOX_WORKSPACE if sandboxed else str(ws.path)
        config = supervisor_config(f"{inside}/script.py", status_fd, limits, isolation, rlimits(limits))
        config["drop_to"] = [uid, uid] if uid is not None else None
        env = sandbox_env(
            workspace=inside, tmpdir="/tmp" if sandboxed else str(ws.path / "tmp"),
            python_bin=os.path.dirname(python), cpus=limits.cpus, run_id=run_id,
        )
        if not sandboxed:
            return supervisor_command(python, run_id, config), env, str(ws.path)
        write_passwd(ws, uid)
        binary = isolation.bwrap or "bwrap"
        plan = bw.BwrapPlan(
            bwrap=binary, as_root=isolation.as_root, workspace=ws.path,
            public_dir=public_dir, passwd=ws.run_dir / "passwd", group=ws.run_dir / "group",
            ro_binds=self.launcher.ro_binds, shm_mb=max(64, limits.memory_mb // 2),
            version=bw.bwrap_version(binary), seccomp_fd=filter_fd, masks=masks,
        )
        command = [*bw.bwrap_args(plan), "--", *supervisor_command(python, run_id, config)]
        return command, env, str(ws.run_dir)


def _spawn(command: list[str], env: dict[str, str], cwd: str, passed: tuple[int, ...], status_r: int) -> subprocess.Popen:
    """Start `command` in a session of its own, handing it the `passed` descriptors (closed
    here either way; `status_r` too where it cannot start)."""
    try:
        return subprocess.Popen(
            command, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, pass_fds=passed, start_new_session=True,
        )
    except OSError as exc:
        os.close(status_r)
        raise SandboxError(f"cannot start {command[0]}: {exc}") from exc
    finally:
        for fd in passed:  # the child has its copies; EOF on the status pipe then means the run is gone
            os.close(fd)


def _watch(
    proc: subprocess.Popen,
    status_r: int,
    ws: Workspace,
    run_id: str,
    limits: RunLimits,
    isolation: Isolation,
    cancel: threading.Event | None,
    started: float,
) -> Watched:
    """process.watch, with how to kill this run and measure its disk and memory."""

    def kill(thorough: bool) -> None:
        kill_group(proc.pid)  # bwrap: takes its pid namespace with it
        if thorough and isolation.kind == "none":
            # The run id is in the command line of every fork and in the environment
            # ($MLEFORGE_RUN_ID) of everything started since.
            sweep(run_id.encode())

    def over_memory() -> bool:
        # memory_mb binds each process (RLIMIT_DATA) and, here, the whole run together.
        return tree_memory_kb(proc.pid, private_shm=isolation.kind == "bwrap") > run_memory_limit_kb(limits)

    disk = functools.partial(over_disk, ws, limits, functools.partial(tree_pids, proc.pid))
    try:
        return watch(proc, status_r, limits, started, over_disk=disk,
                     kill=kill, cancel=cancel, over_memory=over_memory)
    except BaseException:  # our bug or a KeyboardInterrupt: the run must not outlive it
        kill(True)
        proc.wait()
        raise
    finally:
        os.close(status_r)
        proc.stdout.close()
        proc.stderr.close()


def _reap(proc: subprocess.Popen, watched: Watched) -> float:
    """Reap the spawned process into `watched.exit_code`: the CPU time to report if the
    supervisor could not (0 where a process of the run is stuck)."""
    if watched.stuck:
        return 0.0
    # wait4, not Popen.wait: its CPU time is the fallback when the supervisor
    # could not report (the script killed it). Not its maxrss: a forked child's
    # counts the RSS our process had before the exec.
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    watched.exit_code = proc.returncode
    return usage.ru_utime + usage.ru_stime
