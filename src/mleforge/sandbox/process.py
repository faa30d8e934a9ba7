"""Watching one sandboxed process from the parent: its output, its deadline, its disk."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import selectors
import signal
import stat
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from mleforge.sandbox.limits import RunLimits
from mleforge.sandbox.output import CappedCapture

CHUNK = 1 << 16
DISK_CHECK_S = 0.5
# The next disk and memory check waits at least this many times as long as the last one
# took: a run that leaves many files is checked less often, so the checks cost the parent at
# most 1/(1 + DISK_CHECK_BACKOFF) of the run's time however many files it makes (the walk
# itself stops at max_files entries), while a normal run's cheap check keeps the DISK_CHECK_S
# period (`python benchmarks/hostile_grading.py --files 99000` measures both).
DISK_CHECK_BACKOFF = 20
CANCEL_POLL_S = 0.1
POLL_S = 0.05  # only without pidfd (kernels before 5.3)
DRAIN_S = 1.0  # reading what is left in the pipes after the process ended
STUCK_S = 10.0  # after a SIGKILL; only an uninterruptible process outlives this
STATUS_KEEP = 1 << 16


@dataclass(frozen=True)
class Spawned:
    """What `watch` needs of a run's first process, however it was started: the read
    ends of its stdout and stderr, and how to tell that it has exited."""

    stdout_fd: int
    stderr_fd: int
    exited: Callable[[], bool]  # without reaping it
    exit_fd: int | None = None  # readable once it has exited (a pidfd); None: poll
    owns_exit_fd: bool = False  # watch closes exit_fd when done

    @classmethod
    def of_popen(cls, proc: subprocess.Popen) -> Spawned:
        return cls(
            proc.stdout.fileno(), proc.stderr.fileno(), functools.partial(_exited, proc.pid),
            _pidfd(proc.pid), owns_exit_fd=True,
        )


@dataclass
class Watched:
    stdout: CappedCapture
    stderr: CappedCapture
    events: list[dict]  # the supervisor's status lines, in order
    reason: str | None  # why the parent killed the run: timeout, output, disk, cancelled
    exit_code: int | None  # of the spawned process (bwrap or the supervisor), as Popen reports it
    wall_s: float
    stuck: bool = False  # something survived SIGKILL for STUCK_S
    tampered: bool = False  # the status pipe held what the supervisor did not write (_parse_events)

    def last(self, event: str) -> dict | None:
        found = [e for e in self.events if e.get("event") == event]
        return found[-1] if found else None


def _pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def _exited(pid: int) -> bool:
    """Has it exited? Without reaping it: until we do, its pid (and process group id)
    cannot be reused, so killing the group stays safe."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


SUPERVISOR_EVENTS = ("started", "spawned", "exit")


def _parse_events(raw: bytes, complete: bool) -> tuple[list[dict], bool]:
    """The supervisor's status lines, and whether anything else was in the pipe.

    The supervisor writes at most started, spawned and exit, once each, in that order,
    each a whole line. Anything else means a script reached the pipe: parsing stops at
    the first line that is not one of ours (a forged line plus a stray byte would make
    the real exit line unparsable, and the forged one the last good line), and the
    run is not believed (see launch.result_of). `complete`: the capture holds all
    that was written (else its first line may be cut)."""
    events: list[dict] = []
    tampered = not complete
    expected = iter(SUPERVISOR_EVENTS)
    lines = raw.split(b"\n")
    if lines[-1]:  # a last line without its newline: not one of ours
        tampered = True
    for line in lines[:-1]:
        try:
            event = json.loads(line)
        except ValueError:
            return events, True
        name = event.get("event") if isinstance(event, dict) else None
        if name not in expected:  # consumes the names up to it: out of order or twice is tampering
            return events, True
        events.append(event)
    return events, tampered


def _selector(fds: list[int]) -> selectors.BaseSelector:
    selector = selectors.DefaultSelector()
    for fd in fds:
        selector.register(fd, selectors.EVENT_READ)
    return selector


def _wait_s(now: float, deadline: float, next_disk: float, drain_until: float | None, *,
            polls_cancel: bool, polls_exit: bool, killed_at: float | None) -> float:
    """How long one select may block: until the deadline, the next disk check, the end of
    the drain, the next cancel or exit poll, or the moment a killed run counts as stuck."""
    waits = [deadline - now, next_disk - now]
    if drain_until is not None:
        waits.append(drain_until - now)
    if polls_cancel:
        waits.append(CANCEL_POLL_S)
    if polls_exit:
        waits.append(POLL_S)
    if killed_at is not None:
        waits.append(killed_at + STUCK_S - now)
    return max(0.0, min(waits))


def _read_ready(
    selector: selectors.BaseSelector,
    timeout: float,
    captures: dict[int, CappedCapture],
    pidfd: int | None,
    status: CappedCapture,
    output_limit: int,
    over_output: Callable[[], None],
) -> None:
    """One read of every pipe that is ready within `timeout` into its capture; a pipe
    at its end leaves `captures`; stdout or stderr past `output_limit` calls `over_output`."""
    for key, _ in selector.select(timeout):
        if key.fd == pidfd:  # the exit itself is seen by poll() below
            selector.unregister(pidfd)
            continue
        try:
            chunk = os.read(key.fd, CHUNK)
        except BlockingIOError:
            continue
        except OSError:
            chunk = b""
        if not chunk:
            selector.unregister(key.fd)
            del captures[key.fd]
            continue
        capture = captures[key.fd]
        capture.feed(chunk)
        if capture is not status and capture.total > output_limit:
            over_output()


@dataclass
class _Progress:
    """Where one watch stands: the parent's deadline and next disk check, and what has
    happened so far."""

    deadline: float
    next_disk: float
    kill: Callable[[bool], None]
    reason: str | None = None  # why the parent killed the run
    killed_at: float | None = None
    ended: float | None = None  # when the spawned process exited
    drain_until: float = 0.0
    stuck: bool = False

    def stop(self, why: str) -> None:
        """Kill the run for `why` (the first reason is the one kept)."""
        if self.reason is None:
            self.reason = why
            self.killed_at = time.monotonic()
            self.kill(True)

    def finished(self, captures: dict, now: float) -> bool:
        """Done: the process ended and its pipes are drained (or the drain ran out), or a
        killed run outlived STUCK_S (then `stuck`)."""
        if self.ended is not None and (len(captures) == 0 or now >= self.drain_until):
            return True
        if self.ended is None and self.killed_at is not None and now - self.killed_at > STUCK_S:
            self.stuck = True
            return True
        return False

    def exited(self, status: CappedCapture) -> None:
        self.ended = time.monotonic()
        self.drain_until = self.ended + DRAIN_S
        # Whatever the script left running must not hold our pipes open.
        self.kill(b'"event": "exit"' not in bytes(status.tail))

    def check_limits(
        self,
        cancel: threading.Event | None,
        over_disk: Callable[[], bool],
        over_memory: Callable[[], bool] | None,
    ) -> None:
        """While the run goes on: the deadline, the cancel event, and every DISK_CHECK_S
        (or DISK_CHECK_BACKOFF times the last check's cost) its disk and memory."""
        now = time.monotonic()
        if self.ended is not None or self.reason is not None:
            return
        if now >= self.deadline:
            self.stop("timeout")
        elif cancel is not None and cancel.is_set():
            self.stop("cancelled")
        elif now >= self.next_disk:
            if over_disk():
                self.stop("disk")
            elif over_memory is not None and over_memory():
                self.stop("memory")
            took = time.monotonic() - now
            self.next_disk = now + took + max(DISK_CHECK_S, DISK_CHECK_BACKOFF * took)


def watch(
    proc: subprocess.Popen | Spawned,
    status_fd: int,
    limits: RunLimits,
    started: float,
    *,
    over_disk: Callable[[], bool],
    kill: Callable[[bool], None],
    cancel: threading.Event | None = None,
    over_memory: Callable[[], bool] | None = None,
) -> Watched:
    """Read everything until the process is gone; kill it on a limit. `kill(thorough)`
    must end every process of the run (`thorough`: the supervisor may not have).
    `over_disk` and `over_memory` are asked every DISK_CHECK_S, or less often when they
    are slow (see DISK_CHECK_BACKOFF)."""
    spawned = proc if isinstance(proc, Spawned) else Spawned.of_popen(proc)
    out = CappedCapture(limits.output_head_bytes, limits.output_tail_bytes)
    err = CappedCapture(limits.output_head_bytes, limits.output_tail_bytes)
    status = CappedCapture(0, STATUS_KEEP)
    captures = {spawned.stdout_fd: out, spawned.stderr_fd: err, status_fd: status}
    pidfd = spawned.exit_fd
    selector = _selector([*captures, *([] if pidfd is None else [pidfd])])
    # The supervisor enforces timeout_s itself; this is the backstop if it cannot.
    progress = _Progress(deadline=started + limits.timeout_s + limits.kill_grace_s,
                         next_disk=time.monotonic() + DISK_CHECK_S, kill=kill)
    try:
        while True:
            now = time.monotonic()
            if progress.finished(captures, now):
                break
            wait = _wait_s(now, progress.deadline, progress.next_disk,
                           None if progress.ended is None else progress.drain_until, polls_cancel=cancel is not None,
                           polls_exit=pidfd is None, killed_at=progress.killed_at)
            _read_ready(selector, wait, captures, pidfd, status, limits.output_limit_bytes,
                        lambda: progress.stop("output"))
            if progress.ended is None and spawned.exited():
                progress.exited(status)
                continue
            progress.check_limits(cancel, over_disk, over_memory)
    finally:
        selector.close()
        if pidfd is not None and spawned.owns_exit_fd:
            os.close(pidfd)
    if captures:  # a leftover process still holds a pipe: end it for good
        kill(True)
    wall = (progress.ended or time.monotonic()) - started
    events, tampered = _parse_events(bytes(status.tail), complete=status.total == len(status.tail))
    return Watched(
        stdout=out, stderr=err, events=events, reason=progress.reason,
        exit_code=None, wall_s=wall, stuck=progress.stuck, tampered=tampered,
    )


def tree_pids(root: int) -> list[int]:
    """`root` and every process below it (through each thread's children list, which
    the kernel keeps across pid namespaces)."""
    found, stack = [root], [root]
    while stack:
        pid = stack.pop()
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tasks:
            try:
                with open(f"/proc/{pid}/task/{tid}/children") as f:
                    children = [int(c) for c in f.read().split()]
            except OSError:
                continue
            found += children
            stack += children
    return found


_PAGE_KB = os.sysconf("SC_PAGE_SIZE") // 1024


def memory_kb(pid: int) -> int:
    """What one process holds in memory: its proportional set size (pages shared with
    others count a share, so forks are not counted twice over), or its resident set
    where its smaps are closed to us (a non-dumpable supervisor); 0 once it is gone."""
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as f:
            for line in f:
                if line.startswith(b"Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    try:
        with open(f"/proc/{pid}/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE_KB
    except (OSError, IndexError, ValueError):
        return 0


def tree_memory_kb(root: int, private_shm: bool = False) -> int:
    """The memory of a whole run: every process below `root`, summed (see memory_kb), and with
    `private_shm` what the run's own /dev/shm holds (see shm_kb)."""
    pids = tree_pids(root)
    return sum(memory_kb(pid) for pid in pids) + (shm_kb(pids) if private_shm else 0)


def shm_kb(pids: list[int]) -> int:
    """What the run's private /dev/shm holds: a tmpfs, whose pages are in no process's
    resident set until mapped (a file written and closed there is memory all the same).
    Read through /proc/<pid>/root of the first of `pids` in another mount namespace than
    ours (the sandbox's); 0 where none is (an unisolated run shares the host's /dev/shm).
    Pages both in /dev/shm and mapped by a process count twice: the limit errs strict."""
    try:
        own = os.stat("/proc/self/ns/mnt").st_ino
    except OSError:
        return 0
    for pid in pids:
        try:
            if os.stat(f"/proc/{pid}/ns/mnt").st_ino == own:
                continue
            fs = os.statvfs(f"/proc/{pid}/root/dev/shm")
        except OSError:
            continue
        return (fs.f_blocks - fs.f_bfree) * fs.f_frsize // 1024
    return 0


# Descriptors looked at per disk check at most: past this the run's unnamed files cannot be
# counted, which the executors treat as over the limit (nofile bounds each process at 1024).
HIDDEN_SCAN_MAX = 16384


def unlinked_bytes(pids: list[int], device: int) -> tuple[int, bool]:
    """(Bytes of the regular files on `device` that no name reaches any more but a process of
    the run still holds, whether every descriptor was looked at.)

    A file unlinked while open (or made with O_TMPFILE) keeps its blocks until its last
    descriptor and mapping are gone, and a walk of the workspace never sees it. Found through
    each process's open descriptors (/proc/PID/fd) and its mappings of deleted files
    (/proc/PID/maps). A mapping's file is measured through /proc/PID/map_files where we may
    (root), else by the mapping's length. Not seen: a descriptor in flight in a unix socket
    (SCM_RIGHTS), at most RLIMIT_NOFILE of them, each at most RLIMIT_FSIZE."""
    sizes: dict[int, int] = {}
    looked = 0
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            fds = []
        looked += len(fds)
        if looked > HIDDEN_SCAN_MAX:
            return sum(sizes.values()), False
        for fd in fds:
            try:
                info = os.stat(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if info.st_nlink == 0 and info.st_dev == device and stat.S_ISREG(info.st_mode):
                sizes[info.st_ino] = info.st_blocks * 512
        for inode, size in _deleted_mappings(pid, device):
            sizes[inode] = max(size, sizes.get(inode, 0))
    return sum(sizes.values()), True


def _deleted_mappings(pid: int, device: int) -> list[tuple[int, int]]:
    """(inode, bytes) of the deleted files on `device` that `pid` maps."""
    try:
        with open(f"/proc/{pid}/maps", "rb") as f:
            lines = [line for line in f if line.endswith(b" (deleted)\n")]
    except OSError:
        return []
    wanted = f"{os.major(device):02x}:{os.minor(device):02x}".encode()
    found = []
    for line in lines:
        fields = line.split(maxsplit=5)
        if len(fields) < 6 or fields[3] != wanted:
            continue
        span = fields[0].decode()
        start, end = (int(v, 16) for v in span.split("-"))
        try:
            size = os.stat(f"/proc/{pid}/map_files/{span}").st_blocks * 512
        except OSError:
            size = end - start
        found.append((int(fields[4]), size))
    return found


def pid_of_pidfd(fd: int) -> int | None:
    try:
        with open(f"/proc/self/fdinfo/{fd}") as f:
            for line in f:
                if line.startswith("Pid:"):
                    pid = int(line.split()[1])
                    return pid if pid > 0 else None
    except (OSError, ValueError):
        pass
    return None


def kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def marked_processes(marker: bytes) -> list[int]:
    """Pids whose command line or environment contains `marker` (other than ours)."""
    found = []
    own = os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == own:
            continue
        for name in ("cmdline", "environ"):
            try:
                with open(f"/proc/{entry}/{name}", "rb") as f:
                    if marker in f.read():
                        found.append(int(entry))
                        break
            except OSError:
                continue
    return found


# A process just past its exec shows an empty command line and environment for a moment (the
# kernel fills them in after the exec's point of no return): a child a killed process was
# starting can look unmarked. A sweep that killed something looks once more after this pause.
EXEC_WINDOW_S = 0.05


def sweep(marker: bytes, rounds: int = 5) -> int:
    """SIGKILL every process carrying `marker`, until none is left; how many were killed."""
    killed = 0
    confirmed = False
    for _ in range(rounds):
        pids = marked_processes(marker)
        if not pids:
            if killed == 0 or confirmed:
                break
            confirmed = True  # none left: look again once, past the exec window
            time.sleep(EXEC_WINDOW_S)
            continue
        confirmed = False
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
                killed += 1
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.01)
    return killed
