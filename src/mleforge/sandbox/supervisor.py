"""The first process inside the sandbox: sets limits, runs the script, reports how it ended.

The executor runs this file's source with `python -c SOURCE RUN_ID CONFIG`, so
it must use the standard library only (mleforge itself is not visible inside
the sandbox), and it imports as little as it can: every millisecond here is
paid by every run (hence marshal, not json, and no runpy). CONFIG is a
marshalled dict, in hex. It

1. closes every inherited descriptor but stdio and the status pipe,
2. drops to the run's uid when started as root inside bwrap (so that
   RLIMIT_NPROC applies: the kernel exempts uid 0 from it),
3. sets the rlimits (soft = hard, so the script cannot raise them back),
4. forks: the child runs the script as `__main__` in this already started
   interpreter (no second interpreter start), in its own process group, in a
   Landlock domain of its own and under the run's seccomp filter (no keyrings,
   new namespaces or memfd: seccomp.run_program_for), both when sandboxed,
5. waits for it under the wall-clock timeout, kills whatever it left behind,
   and writes one JSON line to the status pipe: exit status, signal, rusage, and
   why the script's Landlock domain could not be entered, if it could not. While
   it waits it checks twice a second that the executor still reads the status
   pipe; when nothing does (the executor died and its death signal missed us), it
   kills the run and exits.

Waiting with `wait4` on our own child is what gives exact exit statuses and
per-run rusage (the parent's RUSAGE_CHILDREN would mix concurrent runs, and
bwrap reports a signal death as an exit code of 128 + signal).

The warm pool (pool/zygote.py) runs this file as a module in its zygote and calls
`supervise(cfg)` in a fresh fork per run, with `warm` set: the script's
process then reseeds the random generators it inherited and ends without
tearing down the preloaded modules (`_exit_warm`).

The script runs as our uid and could reach this process through /proc: so we
make ourselves non-dumpable before it exists (our /proc/<pid>/fd, mem and
environ then need CAP_SYS_PTRACE, which nothing in the sandbox has), and its
fork becomes dumpable again. It can still signal us: the executor believes our
exit line only when we exited with status 0 ourselves (a supervisor killed or
stopped past the timeout is a crash or a timeout, never a clean exit), and only
when the status pipe holds nothing but our own lines (see process.py).
Nothing the script forges here can earn a score: scores come from grading the
submission file in the parent.
"""

# The C module: `signal` imports enum, start-up every run would pay (`python
# benchmarks/sandbox.py` measures a run's start). The script's own `import signal` is
# unaffected.
import _signal as signal
import marshal
import os
import resource
import select
import sys
import time

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_SET_CHILD_SUBREAPER = 36
_IGNORED_HERE = ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR2")
PARENT_DIED = signal.SIGUSR1  # the death signal asked for without bwrap
LIFELINE_S = 0.5  # how often the wait checks that the executor still reads the status pipe
_REAPED: list = []  # the script, once waited for
_SCRIPT: list = []  # the script's pid, once forked (for the executor's death signal)


def _reader_gone(fd: int) -> bool:
    """Whether nothing reads the pipe `fd` writes to any more (the executor died): poll reports
    POLLERR on a pipe's write end without readers."""
    poller = select.poll()
    poller.register(fd, 0)  # POLLERR, POLLHUP and POLLNVAL are reported without being asked for
    return any(events & (select.POLLERR | select.POLLHUP | select.POLLNVAL) for _, events in poller.poll(0))


def _prctl(option: int, value: int) -> None:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(option, value, 0, 0, 0)


def _json(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):  # event names and errno text: only quotes and backslashes to escape
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return repr(value)


def _emit(fd: int, event: dict) -> None:
    line = "{" + ", ".join(f'"{key}": {_json(value)}' for key, value in event.items()) + "}\n"
    try:  # noqa: SIM105 - contextlib would cost an import in every run
        os.write(fd, line.encode())
    except OSError:  # the executor is gone; nobody is to be told
        pass


def _close_inherited(keep: int) -> None:
    # bwrap passes on every descriptor it got; an O_PATH one would let a script
    # walk out of a bind mount, so nothing but stdio and the status pipe survives.
    os.closerange(3, keep)
    os.closerange(keep + 1, 1 << 16)


def _count_own_tasks(uid: int) -> int:
    """Processes and threads of `uid` now: RLIMIT_NPROC counts those machine-wide."""
    total = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status") as f:
                fields = dict(line.split(":", 1) for line in f if ":" in line)
        except OSError:
            continue
        if int(fields.get("Uid", "-1").split()[0]) == uid:
            total += int(fields.get("Threads", "1"))
    return total


def _limit(value: float) -> int:
    return resource.RLIM_INFINITY if value < 0 or value == resource.RLIM_INFINITY else int(value)


def _set_limits(cfg: dict) -> None:
    for name, soft, hard in cfg["rlimits"]:
        which = getattr(resource, name)
        ceiling = resource.getrlimit(which)[1]  # lowering is always allowed, raising is not
        if ceiling != resource.RLIM_INFINITY:
            soft, hard = min(_limit(soft), ceiling), min(_limit(hard), ceiling)
        resource.setrlimit(which, (_limit(soft), _limit(hard)))
    nproc = cfg.get("nproc")
    if nproc is not None:
        if cfg.get("nproc_relative"):
            nproc += _count_own_tasks(os.getuid())
        resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))


def _descendants(root: int) -> list[int]:
    found, stack = [], [root]
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


def _kill_all(child: int, patience_s: float = 10.0) -> None:
    """SIGKILL the script's group and every process below us, until none is left alive.

    One scan that finds only zombies is not proof: a process whose parent dies while
    we scan moves from that parent's children to ours (we are the subreaper), and the
    scan can read our list before the move and the parent's after it. So we stop only
    when two scans in a row find the same processes and none of them alive. The
    killed ones may also be inside fork(), or slow to be scheduled on a loaded machine:
    the rounds go on, with short pauses, until then; `patience_s` bounds the wait for
    processes that cannot die (uninterruptible sleep)."""
    try:  # noqa: SIM105
        os.killpg(child, signal.SIGKILL)
    except OSError:
        pass
    deadline = time.monotonic() + patience_s
    pause, previous = 0.0005, None
    while True:
        found = _descendants(os.getpid())
        alive = [p for p in found if not _is_zombie(p)]
        if not alive:
            if previous == set(found):
                return
            previous = set(found)
            continue
        previous = None
        for pid in alive:
            try:  # noqa: SIM105
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        if time.monotonic() > deadline:
            return
        time.sleep(pause)
        pause = min(2 * pause, 0.02)


def _is_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except (OSError, IndexError):
        return True


def _forget_the_zygote() -> None:
    """A warm pool's run is a fork of a process that has imported `random` and numpy:
    without fresh seeds every run would draw the same "random" numbers. And tempfile
    must look at this run's $TMPDIR, not at one it may have cached in the zygote."""
    for name in ("random", "numpy.random"):
        module = sys.modules.get(name)
        if module is not None:
            module.seed()
    tempfile = sys.modules.get("tempfile")
    if tempfile is not None:
        tempfile.tempdir = None


# Landlock (linux/landlock.h): a ruleset handling only the creation of device nodes
# (which nothing in the sandbox may do anyway), so that it restricts no file access;
# what it buys is the domain: a process in it may ptrace, or open /proc/<pid>/mem,
# environ and fd/N of, only processes in its own domain. bwrap's pid 1 (dumpable, our
# uid, as a user) and this supervisor are outside it; the seccomp filter already
# denies the ptrace call itself, and this closes /proc/1/mem to the script.
SYS_LANDLOCK_CREATE_RULESET, SYS_LANDLOCK_RESTRICT_SELF = 444, 446  # the same on x86_64 and aarch64
LANDLOCK_ACCESS_FS_MAKE_CHAR, LANDLOCK_ACCESS_FS_MAKE_BLOCK = 1 << 6, 1 << 11
PR_SET_NO_NEW_PRIVS = 38
LANDLOCK_REPORT_MAX = 512  # below PIPE_BUF: the child's one write is atomic


def _landlock_scope() -> str | None:
    """In the forked child, before the script: enter a Landlock domain of its own.
    None when it did; else which call failed and why (no Landlock in this kernel, say:
    the seccomp filter still holds, and the run's record says the domain is off)."""
    import ctypes
    import struct

    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    attr = ctypes.create_string_buffer(struct.pack("=Q", LANDLOCK_ACCESS_FS_MAKE_CHAR | LANDLOCK_ACCESS_FS_MAKE_BLOCK), 8)
    ruleset = libc.syscall(SYS_LANDLOCK_CREATE_RULESET, attr, ctypes.c_size_t(8), ctypes.c_uint32(0))
    if ruleset < 0:
        return _failed("landlock_create_ruleset", ctypes.get_errno())
    try:
        if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            return _failed("prctl(PR_SET_NO_NEW_PRIVS)", ctypes.get_errno())
        if libc.syscall(SYS_LANDLOCK_RESTRICT_SELF, ctypes.c_int(ruleset), ctypes.c_uint32(0)) != 0:
            return _failed("landlock_restrict_self", ctypes.get_errno())
        return None
    finally:
        os.close(ruleset)


def _failed(call: str, errno_value: int) -> str:
    import errno  # built in: no file to load, and only on this path

    return f"{call} failed: {errno.errorcode.get(errno_value, str(errno_value))} ({os.strerror(errno_value)})"


def _enter_landlock(report_fd: int) -> None:
    """In the forked child: enter the domain, and tell the supervisor through `report_fd`
    when that failed (one short write: atomic, and the empty pipe cannot block it).
    Closed before the script exists, so the script cannot write a report of its own."""
    why = _landlock_scope()
    if why is not None:
        try:  # noqa: SIM105
            os.write(report_fd, why.encode()[:LANDLOCK_REPORT_MAX])
        except OSError:
            pass
    os.close(report_fd)


def _landlock_report(report_fd: int) -> str | None:
    """After the script's process is reaped: why its Landlock domain was not entered, or
    None (entered, or the child ended before it got there: then no script ran)."""
    try:
        data = os.read(report_fd, LANDLOCK_REPORT_MAX)
    except OSError:
        data = b""
    finally:
        os.close(report_fd)
    return data.decode(errors="replace") or None


PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 22, 2


def _enter_run_filter(program: bytes) -> None:
    """In the forked child, after Landlock: stack the run's seccomp filter (seccomp.run_program_for:
    no keyrings, no new namespaces, no memfd) on the sandbox's. It fails closed: a script
    that cannot be put under it does not run (the run ends with status 70 and says why)."""
    import ctypes

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_char_p)]

    libc = ctypes.CDLL(None, use_errno=True)
    prog = SockFprog(len(program) // 8, program)
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 or \
            libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0) != 0:
        os.write(2, f"sandbox: the run's seccomp filter could not be installed: "
                    f"{os.strerror(ctypes.get_errno())}\n".encode())
        os._exit(70)


def _run_script(script: str, status_fd: int, pdeathsig: bool, warm: bool = False, supervisor: int = 0) -> None:
    """In the forked child: become the script. Never returns."""
    os.close(status_fd)
    _prctl(PR_SET_DUMPABLE, 1)  # the script's own /proc/self, as under `python script.py`
    if warm:
        _forget_the_zygote()
    os.setpgid(0, 0)
    if pdeathsig:
        _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != supervisor:  # it died before the death signal was asked for
            os._exit(1)
    for name in _IGNORED_HERE:
        signal.signal(getattr(signal, name), signal.SIG_DFL)
    signal.signal(PARENT_DIED, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {PARENT_DIED})  # blocked by the supervisor around fork
    signal.signal(signal.SIGINT, signal.default_int_handler)
    sys.argv = [script]
    sys.path[0] = os.path.dirname(script)
    # What `python script.py` does, without runpy's imports (pkgutil, typing), which every
    # run would pay at its start (see `python benchmarks/sandbox.py --latency-only`).
    # The same module attributes, too: multiprocessing's spawn reads __spec__ and
    # __file__ to import the script again in its workers.
    import _frozen_importlib_external  # already loaded: costs nothing

    main = type(sys)("__main__")
    main.__file__ = script
    main.__spec__ = None
    main.__loader__ = _frozen_importlib_external.SourceFileLoader("__main__", script)
    main.__builtins__ = sys.modules["builtins"]  # a module, whoever exec'd this file
    sys.modules["__main__"] = main
    code = 0
    try:
        with open(script, "rb") as f:
            source = f.read()
        # dont_inherit: the script must not get this file's compiler flags.
        exec(compile(source, script, "exec", dont_inherit=True), main.__dict__)
    except SystemExit as exc:
        if not warm:
            raise
        code = exc.code
    except BaseException as exc:
        # Show the traceback as `python script.py` would, without our frames.
        # (The hook prints the exception's own __traceback__, whatever tb it is given.)
        tb = exc.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename != script:
            tb = tb.tb_next
        sys.excepthook(type(exc), exc.with_traceback(tb), tb)
        code = 1
    if warm:
        _exit_warm(code, main)
    sys.exit(code)


def _exit_warm(code, main) -> None:
    """End a warm pool's run as interpreter shutdown would, less tearing down the modules
    the zygote preloaded (with pandas and scikit-learn that would give back much of the
    start-up the pool saves; its per-run time is in `python benchmarks/sandbox.py`):
    non-daemon threads are waited for, atexit handlers run, the script's globals are
    released (so its open files are flushed and closed), the output is flushed."""
    if code is None:
        status = 0
    elif isinstance(code, int):
        status = code
    else:  # sys.exit("message"), as the interpreter reports it
        sys.stderr.write(f"{code}\n")
        status = 1
    import atexit
    import gc

    try:
        threading = sys.modules.get("threading")
        if threading is not None:
            threading._shutdown()
        atexit._run_exitfuncs()
        main.__dict__.clear()
        gc.collect()
    except BaseException as exc:  # noqa: BLE001 - shutdown goes on, as the interpreter's would
        sys.stderr.write(f"Exception during shutdown: {exc!r}\n")
    for stream in (sys.stdout, sys.stderr):
        try:  # noqa: SIM105
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass
    os._exit(status & 0xFF)


def main() -> None:
    supervise(marshal.loads(bytes.fromhex(sys.argv[2])))


def supervise(cfg: dict) -> None:
    """Everything after reading the config: also where a warm pool's fresh fork starts."""
    status_fd = cfg["status_fd"]
    _close_inherited(status_fd)
    for name in _IGNORED_HERE:
        signal.signal(getattr(signal, name), signal.SIG_IGN)
    if cfg.get("pdeathsig"):
        _die_with_executor()
    if cfg.get("subreaper"):
        _prctl(PR_SET_CHILD_SUBREAPER, 1)
    if cfg.get("drop_to"):
        _drop_to(*cfg["drop_to"])
    _set_limits(cfg)
    # After the uid change (which may set it from fs.suid_dumpable): the script must not
    # open our status pipe, memory or environment through /proc/<our pid>/.
    _prctl(PR_SET_DUMPABLE, 0)
    _emit(status_fd, {"event": "started", "pid": os.getpid(), "uid": os.getuid()})
    child, report_r = _spawn_script(cfg, status_fd)
    _emit(status_fd, {"event": "spawned", "pid": child})
    timed_out = _start_timer(child, status_fd, float(cfg["timeout_s"]))
    status, cpu_s, maxrss = _reap(child)
    code = os.waitstatus_to_exitcode(status) if status is not None else None
    _emit(status_fd, {
        "event": "exit",
        "returncode": code if code is not None and code >= 0 else None,
        "signal": -code if code is not None and code < 0 else None,
        "timed_out": timed_out[0],
        "cpu_s": cpu_s,
        "maxrss_kb": maxrss,
        "landlock_off": _landlock_report(report_r) if report_r is not None else None,
    })


def _die_with_executor() -> None:
    """Ask for PARENT_DIED when the executor dies. Not SIGKILL: dying at once would orphan
    what the script started. Told that the executor is gone, we kill our whole tree first
    (as the subreaper, every process the script left is in it)."""
    executor = os.getppid()

    def on_parent_death(signum, frame):
        if os.getppid() != executor:  # not the script sending the same signal
            if _SCRIPT:
                _kill_all(_SCRIPT[0])
            os._exit(1)

    signal.signal(PARENT_DIED, on_parent_death)
    _prctl(PR_SET_PDEATHSIG, PARENT_DIED)
    if os.getppid() != executor:
        os._exit(1)


def _spawn_script(cfg: dict, status_fd: int) -> tuple:
    """Fork the script's process: (its pid, the read end of its Landlock report or None)."""
    # The executor may die while we fork: its death signal waits until _SCRIPT is set,
    # so the handler kills the new script instead of exiting and leaving it running.
    signal.pthread_sigmask(signal.SIG_BLOCK, {PARENT_DIED})
    supervisor = os.getpid()
    # The child says through this pipe whether it entered its Landlock domain: the exit
    # line carries that on, and the run's record says "off" when it did not.
    report_r, report_w = os.pipe() if cfg.get("landlock") else (None, None)
    child = os.fork()
    if child == 0:
        if report_w is not None:
            os.close(report_r)
            _enter_landlock(report_w)
        if cfg.get("seccomp"):
            _enter_run_filter(cfg["seccomp"])
        _run_script(cfg["script"], status_fd, bool(cfg.get("pdeathsig")), bool(cfg.get("warm")), supervisor)
    _SCRIPT.append(child)
    if report_w is not None:
        os.close(report_w)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {PARENT_DIED})
    return child, report_r


def _start_timer(child: int, status_fd: int, timeout_s: float) -> list:
    """The wall-clock timeout, and the lifeline: a timer that ticks every LIFELINE_S until
    the deadline. Returns [timed out?], set by the tick that kills the run at the deadline."""
    timed_out = [False]
    deadline = time.monotonic() + timeout_s

    def on_alarm(signum, frame):
        # Every LIFELINE_S until the deadline: whether the executor still reads our status
        # pipe. Its death signal (bwrap's --die-with-parent, or ours) can miss: bwrap asks
        # for it only after its clone, so an executor killed in between leaves bwrap an
        # orphan that nothing signals. Then we kill the run ourselves.
        if _REAPED:
            return
        left = deadline - time.monotonic()
        if left <= 0:
            timed_out[0] = True
            _kill_all(child)
            return
        if _reader_gone(status_fd):
            _kill_all(child)
            os._exit(1)
        signal.setitimer(signal.ITIMER_REAL, min(LIFELINE_S, left))

    signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, min(LIFELINE_S, timeout_s))
    return timed_out


def _drop_to(uid: int, gid: int) -> None:
    """Become the run's own user (no supplementary groups) before the script exists."""
    os.setgroups([])
    os.setgid(gid)
    os.setuid(uid)


def _reap(child: int) -> tuple:
    """Wait for every process of the run (we are their subreaper) and sum their usage:
    (the script's wait status or None, CPU seconds, peak RSS in KiB). When the script
    ends the timer stops and whatever it left running is killed."""
    status = None
    utime = stime = 0.0
    maxrss = 0
    while True:
        try:
            pid, wstatus, usage = os.wait4(-1, 0)
        except ChildProcessError:
            break
        utime += usage.ru_utime
        stime += usage.ru_stime
        maxrss = max(maxrss, usage.ru_maxrss)
        if pid == child:
            status = wstatus
            _REAPED.append(pid)  # before the timer stops: a tick already due then does nothing
            signal.setitimer(signal.ITIMER_REAL, 0)
            _kill_all(child)  # what the script left running ends with it
    return status, utime + stime, maxrss


if __name__ == "__main__":
    main()
    os._exit(0)  # nothing of ours to flush; a full interpreter shutdown is paid by every run
