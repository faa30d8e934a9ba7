"""Launching a run on this machine: what the local executor and the warm pool share.

One run:

    parent (this process)                      sandbox
    create workspace ── the backend's Start ─> [bwrap or zygote ─>] supervisor ─fork─> script
    watch: stdout/stderr head+tail, status pipe,        sets rlimits, drops uid,
           deadline + grace, disk, cancel               timeout, wait4, kills leftovers
    take submission/submission.csv out, remove workspace, build the ExecutionResult

A backend hands its `Launcher` a `Start`: how the run's processes start in a ready
workspace and are watched until they are gone (process by process for the local
executor, a fork of a warm zygote for the pool). Everything around that is here, the
same for both: the session folder, the isolation chosen once, the workspace, what the
supervisor is told, the whole run's memory limit, and the result built from what was
watched (which of the supervisor's lines to believe, why the run ended).
"""

from __future__ import annotations

import hashlib
import os
import secrets
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

from mleforge.errors import SandboxError
from mleforge.sandbox import bwrap as bw
from mleforge.sandbox import seccomp
from mleforge.sandbox.interpreter import python_roots
from mleforge.sandbox.isolation import (
    Isolation,
    landlock_of_run,
    probe_once,
    require_hidden,
    require_world_readable,
    visible_roots,
)
from mleforge.sandbox.limits import MIB, RunLimits
from mleforge.sandbox.masks import hidden_paths
from mleforge.sandbox.process import Watched, unlinked_bytes
from mleforge.sandbox.result import ExecutionResult, killed_by_of
from mleforge.sandbox.workspace import (
    Session,
    Workspace,
    create_workspace,
    disk_usage,
    hand_back,
    remove_tree,
    take_submission,
)
from mleforge.tasks.preparation import require_prepared
from mleforge.tasks.spec import DataSource, Limits
from mleforge.tasks.task import Task

# Each run as root gets a uid of its own, far above real accounts.
RUN_UID_BASE = 1 << 24
RUN_UID_SPAN = 1 << 22
# The parent's clock starts before bwrap and the interpreter do: a run the supervisor
# let finish at its deadline may read a little over it here.
TIMEOUT_SLACK_S = 0.5
# What a run's processes may hold together above memory_mb: the interpreter's code and
# libraries, which RLIMIT_DATA (per process) does not count either.
RUN_MEMORY_SLACK_MB = 128
PROBE_LIMITS = RunLimits(timeout_s=30, memory_mb=512, cpus=1)


class Start(Protocol):
    def __call__(
        self,
        ws: Workspace,
        run_id: str,
        public_dir: Path | None,
        limits: RunLimits,
        isolation: Isolation,
        uid: int | None,
        cancel: threading.Event | None,
        masks: tuple[str, ...],
    ) -> tuple[Watched, float]:
        """Start the run's processes in a ready workspace and watch them until they are
        gone: (what was seen, the CPU time to report if the supervisor could not). Under
        bwrap the sandbox covers `masks` (masks.hidden_paths)."""
        ...


class Launcher:
    """The runs of one executor on this machine: its interpreter and extra binds, its
    session folder (made on first use), its isolation (chosen once by `choose`, which
    probes with a real run through `probe`), and the steps of a run around `start`.

    Thread-safe: `run` may be called from many threads at once."""

    def __init__(
        self,
        executor: str,
        requested: str,
        start: Start,
        choose: Callable[[], Isolation],
        *,
        python: str | None = None,
        base_dir: str | Path | None = None,
        extra_ro_binds: Sequence[str | Path] = (),
    ):
        self.executor = executor  # the executor's name: in errors and the probe's key
        self.requested = requested
        self.python = python or sys.executable
        self.base_dir = Path(base_dir) if base_dir else None
        self.extra_ro_binds = tuple(os.path.realpath(p) for p in extra_ro_binds)
        self._start = start
        self._choose = choose
        self._session: Session | None = None
        self._isolation: Isolation | None = None
        self._lock = threading.Lock()  # guards _isolation
        self._session_lock = threading.Lock()  # guards _session (the probe needs it under _lock)

    @property
    def ro_binds(self) -> tuple[str, ...]:
        return (*python_roots(self.python), *self.extra_ro_binds)

    def masks(self, isolation: Isolation, sources: tuple[DataSource, ...] = ()) -> tuple[str, ...]:
        """What a bwrap sandbox covers: the default data sources, `sources` (a task's), and
        mleforge's package, wherever the interpreter has them in view (masks.py)."""
        if isolation.kind != "bwrap":
            return ()
        return hidden_paths(self.python, sources, visible_roots(self.ro_binds))

    def session(self) -> Session:
        with self._session_lock:
            if self._session is None:
                self._session = Session(self.base_dir)
            return self._session

    def resolve_isolation(self) -> Isolation:
        """Decide once (probing bwrap with a real run) and remember."""
        with self._lock:
            if self._isolation is None:
                self._isolation = self._choose()
            return self._isolation

    def probe(self, candidate: Isolation) -> tuple[str | None, Isolation]:
        """A trivial run under `candidate` (see isolation.probe_once), once per process."""
        key = (self.executor, candidate, self.python, self.extra_ro_binds)
        return probe_once(key, candidate, lambda script, isolation: self.execute(
            script, "probe", None, PROBE_LIMITS, isolation, False, None, self.masks(isolation)))

    def run(
        self, script: str, task: Task, limits: RunLimits | Limits | None, keep: bool, cancel: threading.Event | None
    ) -> ExecutionResult:
        require_prepared(task)
        limits = RunLimits.of(limits, task.spec.limits)
        if self.resolve_isolation().kind == "bwrap":
            require_hidden(task, self.ro_binds)
        return self.run_public(script, task.id, task.public_dir, limits, keep, cancel, task.spec.sources)

    def run_public(
        self, script: str, task_id: str, public_dir: Path, limits: RunLimits, keep: bool,
        cancel: threading.Event | None, sources: tuple[DataSource, ...] = (),
    ) -> ExecutionResult:
        isolation = self.resolve_isolation()
        if isolation.kind == "bwrap" and isolation.as_root:
            require_world_readable(public_dir)
        masks = self.masks(isolation, tuple(sources))
        return self.execute(script, task_id, public_dir, limits, isolation, keep, cancel, masks)

    def execute(
        self,
        script: str,
        task_id: str,
        public_dir: Path | None,
        limits: RunLimits,
        isolation: Isolation,
        keep: bool,
        cancel: threading.Event | None,
        masks: tuple[str, ...] = (),
    ) -> ExecutionResult:
        """A fresh workspace, the backend's start (its sandbox covering `masks`), the
        submission taken out, the workspace removed (or kept and handed back), the result."""
        session = self.session()
        run_id = secrets.token_hex(8)
        sandboxed = isolation.kind == "bwrap"
        uid = RUN_UID_BASE + secrets.randbelow(RUN_UID_SPAN) if sandboxed and isolation.as_root else None
        ws = create_workspace(
            session, run_id, script, public_dir, copy_input=not sandboxed,
            owner=(uid, uid) if uid is not None else None, keep=keep,
        )
        try:
            watched, fallback_cpu = self._start(ws, run_id, public_dir, limits, isolation, uid, cancel, masks)
            submission, refused = take_submission(ws, session.path / "submissions")
        finally:
            if keep:
                if uid is not None:
                    hand_back(ws)
            else:
                remove_tree(ws.run_dir)
        return result_of(
            run_id, task_id, script, limits, isolation, watched, submission, refused,
            fallback_cpu, ws if keep else None, None if sandboxed else ws.path,
        )

    def discard(self, result: ExecutionResult) -> None:
        """Delete a run's submission once graded (else it stays until close())."""
        if result.submission_path and self._session is not None and result.workspace is None:
            path = Path(result.submission_path)
            if path.parent.parent == self._session.path / "submissions":
                remove_tree(path.parent)

    def close(self) -> None:
        with self._session_lock:
            if self._session is not None:
                self._session.close()
                self._session = None


# -- what both backends start a run with ----------------------------------------------


def rlimits(limits: RunLimits) -> list[list]:
    """[name, soft, hard] (-1: unlimited). Soft = hard, so the script cannot raise them,
    except CPU: its hard limit a second later lets SIGXCPU say why the run ended."""
    address_space = limits.effective_address_space_mb * MIB if limits.effective_address_space_mb else -1
    cpu = limits.effective_cpu_s
    return [
        ["RLIMIT_DATA", limits.memory_mb * MIB, limits.memory_mb * MIB],
        ["RLIMIT_AS", address_space, address_space],
        ["RLIMIT_CPU", cpu, cpu + 1],
        ["RLIMIT_FSIZE", limits.effective_file_size_mb * MIB, limits.effective_file_size_mb * MIB],
        ["RLIMIT_NOFILE", limits.nofile, limits.nofile],
        ["RLIMIT_CORE", 0, 0],
    ]


def supervisor_config(
    script: str, status_fd: int, limits: RunLimits, isolation: Isolation, rlimits: list[list]
) -> dict:
    """What supervisor.py is told, but the uid to drop to."""
    sandboxed = isolation.kind == "bwrap"
    return {
        "script": script,
        "status_fd": status_fd,
        "timeout_s": limits.timeout_s,
        "rlimits": rlimits,
        # Root is exempt from RLIMIT_NPROC; without a sandbox, as another user, the
        # limit counts all of the user's processes, so it is set relative to them.
        "nproc": None if (isolation.as_root and not sandboxed) else limits.nproc,
        "nproc_relative": not sandboxed,
        "drop_to": None,
        "subreaper": not sandboxed,  # inside bwrap the pid namespace does this job
        "pdeathsig": not sandboxed,  # inside bwrap --die-with-parent does
        # The script in a Landlock domain of its own: /proc/<pid>/mem of bwrap's pid 1
        # closed to it (see supervisor._landlock_scope).
        "landlock": sandboxed,
        # Stacked on the sandbox's in the script's process: no keyrings, no new namespaces,
        # no memfd or System V shared memory (seccomp.run_program_for).
        "seccomp": seccomp.run_program_for() if sandboxed else None,
    }


def seccomp_fd(isolation: Isolation) -> int | None:
    """A descriptor holding the seccomp filter for a bwrap launch (see seccomp.py), or
    None: no bwrap, or no filter for this machine's architecture (recorded as such)."""
    if isolation.kind != "bwrap":
        return None
    program = seccomp.program_for()
    return None if program is None else seccomp.filter_fd(program)


def write_passwd(ws: Workspace, uid: int | None) -> None:
    """The run's /etc/passwd and /etc/group, naming its uid (the sandbox user's without one)."""
    passwd, group = bw.passwd_text(uid if uid is not None else bw.SANDBOX_UID,
                                   uid if uid is not None else bw.SANDBOX_UID)
    (ws.run_dir / "passwd").write_text(passwd)
    (ws.run_dir / "group").write_text(group)


def over_disk(ws: Workspace, limits: RunLimits, pids: Callable[[], list[int]] | None = None) -> bool:
    """Whether the workspace holds more than the run may write (bytes or entries): what its
    walk finds, and the files without a name that the run's processes (`pids`) still hold
    (unlinked while open, O_TMPFILE: see process.unlinked_bytes)."""
    used, entries, uncountable = disk_usage(ws, limits.max_files + 1)
    # What cannot be counted (an unreadable or too deep folder) could hide anything.
    if uncountable is not None or used > limits.disk_mb * MIB or entries > limits.max_files:
        return True
    if pids is None:
        return False
    try:
        device = os.stat(ws.path).st_dev
    except OSError:
        return True
    hidden, complete = unlinked_bytes(pids(), device)
    return not complete or used + hidden > limits.disk_mb * MIB


def run_memory_limit_kb(limits: RunLimits, baseline_kb: int = 0) -> int:
    """The whole run's memory limit (see process.tree_memory_kb), `baseline_kb` on top
    (a warm pool's run shares the zygote's memory)."""
    return (limits.memory_mb + RUN_MEMORY_SLACK_MB) * 1024 + baseline_kb


# -- what was watched, as an ExecutionResult -----------------------------------------


def result_of(
    run_id: str,
    task_id: str,
    script: str,
    limits: RunLimits,
    isolation: Isolation,
    watched: Watched,
    submission: Path | None,
    refused: str | None,
    fallback_cpu: float,
    kept: Workspace | None,
    unisolated_path: Path | None = None,
) -> ExecutionResult:
    """The ExecutionResult of a watched run: the supervisor's exit line where it is believed
    (else what the parent saw), why the run ended, and every warning the run earned."""
    stdout, stderr = _output(watched, unisolated_path)
    exit_event, forged = _believed_exit(watched)
    not_entered = (exit_event or {}).get("landlock_off")
    warnings = _warnings(isolation, watched, refused, not_entered)
    if exit_event is not None:
        returncode, signal_number = exit_event.get("returncode"), exit_event.get("signal")
        timed_out = bool(exit_event.get("timed_out"))
        cpu_s, rss_kb = float(exit_event.get("cpu_s", 0.0)), int(exit_event.get("maxrss_kb", 0))
    else:
        returncode, timed_out = None, False
        signal_number = _unreported_signal(watched, isolation, forged, stderr)
        cpu_s, rss_kb = fallback_cpu, 0
        warnings.append("the supervisor did not report (killed): CPU time is partial, peak memory unknown (0)")
    # A run that outlived its timeout timed out, whatever its supervisor said (one
    # stopped, then resumed after the deadline, would report a late clean exit).
    if watched.wall_s > limits.timeout_s + TIMEOUT_SLACK_S:
        timed_out = True
    killed_by = killed_by_of(
        parent_reason=watched.reason, timed_out=timed_out, returncode=returncode,
        signal_number=signal_number, cpu_s=cpu_s, cpu_limit_s=limits.effective_cpu_s,
        stderr_tail=stderr[-4096:],
    )
    if exit_event is None and killed_by is None:
        killed_by = "signal"  # no believable exit: a crash, never a clean one
    return ExecutionResult(
        run_id=run_id, task_id=task_id, returncode=returncode, signal=signal_number,
        timed_out=timed_out or watched.reason == "timeout", killed_by=killed_by,
        wall_s=round(watched.wall_s, 4), cpu_s=round(cpu_s, 4), peak_memory_mb=round(rss_kb / 1024, 2),
        stdout=stdout, stderr=stderr, stdout_bytes=watched.stdout.total,
        stderr_bytes=watched.stderr.total, submission_path=str(submission) if submission else None,
        isolation=isolation.kind, bwrap=isolation.bwrap, bwrap_version=isolation.bwrap_version,
        landlock=landlock_of_run(isolation.landlock, not_entered), warnings=tuple(warnings),
        workspace=str(kept.path) if kept else None,
        script_sha256=hashlib.sha256(script.encode("utf-8")).hexdigest(), limits=limits.to_dict(),
    )


def _output(watched: Watched, unisolated_path: Path | None) -> tuple[str, str]:
    stdout, stderr = watched.stdout.text(), watched.stderr.text()
    if unisolated_path is not None:
        # Shown as under bwrap: an output (and a state built from it) must not depend
        # on where this run's workspace happened to be.
        stdout, stderr = (_as_sandbox_paths(text, unisolated_path) for text in (stdout, stderr))
    return stdout, stderr


def _believed_exit(watched: Watched) -> tuple[dict | None, bool]:
    """(The supervisor's exit line, or None where it is not believed; whether it was forged.)

    The exit line is believed only from a supervisor that exited with status 0 itself (the
    executor's own wait status, out of the script's reach) and a status pipe that holds
    only its lines: else the script killed, stopped or forged it, and the run is a crash."""
    exit_event = watched.last("exit")
    forged = exit_event is not None and (watched.tampered or watched.exit_code != 0)
    return (None if forged else exit_event), forged


def _warnings(isolation: Isolation, watched: Watched, refused: str | None, not_entered: str | None) -> list[str]:
    warnings = list(isolation.warnings)
    if watched.tampered:
        warnings.append("the status pipe held lines the supervisor did not write (a forged status?): "
                        "the run counts as a crash")
    if refused:
        warnings.append(refused)
    if watched.stuck:
        warnings.append("a process of the run survived SIGKILL for 10 s (uninterruptible I/O?)")
    if not_entered and not str(isolation.landlock).startswith("off"):  # the executor's record said on
        warnings.append(f"the script ran outside its Landlock domain ({not_entered}): /proc/<pid>/mem of "
                        "processes outside the script was open to it (the seccomp filter still denied ptrace)")
    return warnings


def _unreported_signal(watched: Watched, isolation: Isolation, forged: bool, stderr: str) -> int | None:
    """The supervisor did not report: killed by us (backstop) or by the script. The signal
    that ended it; a SandboxError where the sandbox never started or its supervisor failed."""
    if watched.last("started") is None and watched.reason is None and not watched.tampered:
        raise SandboxError(
            f"the sandbox did not start (exit status {watched.exit_code}): {stderr.strip()[-2000:]}"
        )
    signal_number = _outer_signal(watched.exit_code, isolation.kind)
    if signal_number is None and watched.reason is None and not (forged or watched.tampered):
        raise SandboxError(
            f"the sandbox's supervisor failed (exit status {watched.exit_code}): {stderr.strip()[-2000:]}"
        )
    return signal_number


def _outer_signal(exit_code: int | None, kind: str) -> int | None:
    """The signal that ended the supervisor, from the spawned process's status."""
    if exit_code is None:
        return None
    if exit_code < 0:
        return -exit_code
    if kind == "bwrap" and 128 < exit_code < 128 + 65:  # bwrap reports a signal as 128 + n
        return exit_code - 128
    return None


def _as_sandbox_paths(text: str, workspace: Path) -> str:
    for path in dict.fromkeys((str(workspace), os.path.realpath(workspace))):
        text = text.replace(path, bw.SANDBOX_WORKSPACE)
    return text
