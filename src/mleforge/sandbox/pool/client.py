"""The executor's end of a warm pool's zygote: start it, ask it for runs, and hold each run.

A zygote is one long-lived process (zygote.py) reached over a SOCK_SEQPACKET
control socket. A run is asked for with one message carrying its request and
four descriptors (the run's stdout, stderr and status pipes, and one end of a
channel of its own); the run's shim answers on that channel with pidfds of
itself and of its child, and, before it exits, with the run's exit status.
Pidfds name processes across pid namespaces and are never reused, so killing
a run by them cannot hit anything else.
"""

from __future__ import annotations

import contextlib
import functools
import marshal
import os
import select
import signal
import socket
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from mleforge.errors import SandboxError
from mleforge.sandbox.interpreter import supervisor_source

START_TIMEOUT_S = 180.0  # importing scikit-learn on a loaded machine
RUN_START_TIMEOUT_S = 60.0
RUN_ID_SLOT = "-" * 16  # zygote.RUN_ID_SLOT
ZYGOTE_ROLE = "mleforge-zygote--"
# `python -c BOOT ROLE SLOT FD`: turns the sources it is sent into modules and serves.
BOOT = (
    "import marshal, socket, sys\n"
    "ctl = socket.socket(fileno=int(sys.argv[3]))\n"
    "for name, source in marshal.loads(ctl.recv(1 << 22)).items():\n"
    "    module = type(sys)(name)\n"
    "    sys.modules[name] = module\n"
    "    exec(compile(source, '<' + name + '>', 'exec'), module.__dict__)\n"
    "sys.modules['_mleforge_zygote'].serve(ctl)\n"
)


class ZygoteGone(SandboxError):
    """The zygote died: a new one may serve the run (nothing of the run has started)."""


@functools.lru_cache(maxsize=1)
def _sources() -> bytes:
    zygote = (Path(__file__).parent / "zygote.py").read_text(encoding="utf-8")
    return marshal.dumps({"_mleforge_supervisor": supervisor_source(), "_mleforge_zygote": zygote})


def zygote_command(python: str) -> list[str]:
    """The interpreter part of the command (the control socket's fd is appended)."""
    return [python, "-s", "-u", "-c", BOOT, ZYGOTE_ROLE, RUN_ID_SLOT]


@dataclass
class Zygote:
    """One started zygote; `users` counts the runs in flight (the pool's lock guards it)."""

    key: tuple
    proc: subprocess.Popen
    ctl: socket.socket
    ready: dict
    log_path: Path
    users: int = 0
    _send_lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def start(
        cls, key: tuple, command: list[str], env: dict, cwd: str, config: dict, log_path: Path,
        pass_fds: tuple[int, ...] = (),
    ) -> Zygote:
        """`pass_fds`: further descriptors the command reads (bwrap's seccomp filter);
        closed here once the zygote has them, as the control socket's end is."""
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            with open(log_path, "ab") as log:
                proc = subprocess.Popen(
                    [*command, str(child.fileno())], env=env, cwd=cwd, stdin=subprocess.DEVNULL,
                    stdout=log, stderr=log, pass_fds=(child.fileno(), *pass_fds), start_new_session=True,
                )
        except OSError as exc:
            parent.close()
            raise SandboxError(f"cannot start the warm pool's zygote ({command[0]}): {exc}") from exc
        finally:
            child.close()
            for fd in pass_fds:
                os.close(fd)
        zygote = cls(key, proc, parent, {}, log_path)
        try:
            parent.send(_sources())
            parent.send(marshal.dumps(config))
            parent.settimeout(START_TIMEOUT_S)
            message = parent.recv(1 << 16)
            parent.settimeout(None)
        except (TimeoutError, OSError) as exc:
            zygote.close()
            raise SandboxError(f"the warm pool's zygote did not start ({exc}): {zygote.log_tail()}") from exc
        if not message:
            zygote.close()
            raise SandboxError(
                f"the warm pool's zygote exited on start (status {proc.returncode}): {zygote.log_tail()}"
            )
        zygote.ready = marshal.loads(message)
        return zygote

    def alive(self) -> bool:
        """Its process runs and its end of the control socket is open (it never writes
        there after "ready": readable means closed, which comes first when it dies)."""
        if self.proc.poll() is not None:
            return False
        try:
            return not select.select([self.ctl], [], [], 0)[0]
        except (OSError, ValueError):  # closed by us
            return False

    def log_tail(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-2000:].strip() or "(no output)"
        except OSError:
            return "(no log)"

    def spawn(self, request: dict, stdio: tuple[int, int, int]) -> RunChannel:
        """Fork a run (stdout, stderr and status write ends given); returns once it started."""
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            with self._send_lock:
                socket.send_fds(self.ctl, [marshal.dumps(request)], [*stdio, theirs.fileno()])
        except OSError as exc:
            mine.close()
            raise ZygoteGone(f"the warm pool's zygote is gone ({exc})") from exc
        finally:
            theirs.close()  # the shim holds it now: its exit is our EOF
        try:
            mine.settimeout(RUN_START_TIMEOUT_S)
            message, fds, _, _ = socket.recv_fds(mine, 1 << 16, 4)
        except (TimeoutError, OSError) as exc:
            mine.close()
            raise SandboxError(f"the warm pool's run did not start: {exc}") from exc
        if message == b"started" and len(fds) == 2:
            mine.setblocking(False)
            return RunChannel(mine, fds[0], fds[1])
        for fd in fds:
            os.close(fd)
        mine.close()
        if not message:  # the shim died without a word: was it the zygote dying?
            deadline = time.monotonic() + 2
            while self.alive() and time.monotonic() < deadline:
                time.sleep(0.01)
            if not self.alive():
                raise ZygoteGone(f"the warm pool's zygote died: {self.log_tail()}")
        text = message.decode(errors="replace").removeprefix("failed ") or "the run's shim exited at once"
        raise SandboxError(text)

    def close(self) -> None:
        """EOF on the control socket ends the zygote; its runs die with it (PDEATHSIG)."""
        self.ctl.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


@dataclass
class RunChannel:
    """One run in flight: the channel to its shim and pidfds of the shim and its child
    (the run's pid-namespace init when isolated, the supervisor otherwise)."""

    sock: socket.socket
    shim_pidfd: int
    child_pidfd: int
    _ended: bool = False
    _outcome: tuple[int | None, float] = (None, 0.0)

    @property
    def fileno(self) -> int:
        """Readable when the shim reports the end (or dies)."""
        return self.sock.fileno()

    def exited(self) -> bool:
        """Is the run over? The shim says so once everything of the run is gone (it exits
        itself only after); a shim that died is over too."""
        if not self._ended:
            self._read()
        if not self._ended and select.select([self.shim_pidfd], [], [], 0)[0]:
            self._read()
            self._ended = True
        return self._ended

    def _read(self) -> None:
        while not self._ended:
            try:
                message = self.sock.recv(1 << 16)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                message = b""
            self._ended = True
            parts = message.split()
            if len(parts) == 3 and parts[0] == b"exit":
                with contextlib.suppress(ValueError):
                    self._outcome = (int(parts[1]), float(parts[2]))

    def kill(self) -> None:
        """SIGKILL the child: an init takes its whole pid namespace with it."""
        with contextlib.suppress(ProcessLookupError, OSError):
            signal.pidfd_send_signal(self.child_pidfd, signal.SIGKILL)

    def outcome(self) -> tuple[int | None, float]:
        """(the child's exit status as an exit code, its CPU seconds); (None, 0) when the
        shim could not say (it was killed)."""
        self.exited()
        return self._outcome

    def close(self) -> None:
        self.sock.close()
        for fd in (self.shim_pidfd, self.child_pidfd):
            with contextlib.suppress(OSError):
                os.close(fd)
