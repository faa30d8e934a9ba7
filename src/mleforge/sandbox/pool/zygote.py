"""The warm pool's zygote: imports the heavy modules once, then forks one fresh process tree per run.

Like supervisor.py this runs where mleforge is not importable: client.py sends
this file's source, the supervisor's and a config over the control socket to a
tiny bootstrap (`python -s -u -c BOOT ROLE RUN_ID_SLOT FD`), which makes them
modules and calls `serve`. Standard library only.

    zygote (trusted: never runs a script; imports numpy, pandas, scikit-learn...)
      └─ fork per request ─> shim        its own session; the run's namespaces and mounts;
            (isolated)                    reports the outcome to the executor, then exits
            └─ fork ─> init              pid 1 of the run's pid namespace: mounts /proc, gives
                                         up every capability, reaps; when it ends the kernel
                                         kills everything left in the namespace
                  └─ fork ─> supervisor  supervisor.supervise(): rlimits, timeout, wait4, status
                        └─ fork ─> script

Two ways to hold the capabilities a run's namespaces need (config "userns"):

- as root, the zygote keeps a few (bwrap.ZYGOTE_CAPS) and the init drops them
  all by changing to the run's own uid;
- as anyone else, the zygote has none. The shim first makes a user namespace of
  its own (the one uid there, the sandbox user, is the zygote's, which is ours
  outside), in which it holds every capability, and forbids any further user
  namespace in it (max_user_namespaces = 0, as bwrap's --disable-userns does):
  the namespaces it then makes belong to it, and RLIMIT_NPROC counts the run's
  processes on their own, as with a bwrap per run. The init gives up every
  capability explicitly (bounding and ambient sets, then capset) and locks the
  securebits, since it keeps its uid.

Unisolated (no bwrap) the shim makes no namespaces and forks the supervisor
itself; as a subreaper it ends whatever the script left once the supervisor is
gone. Each fork serves one run and exits: nothing that ran a script is reused.

The run id is written into the slots our command line and environment block
were started with, so every process of a run carries it in /proc/PID/cmdline
and /proc/PID/environ as one of the local executor does (the executor's sweep
and the tests find leftovers by it). The shim does not: it reports that the run
is over before it exits itself, and so is never a leftover.
"""

import contextlib
import ctypes
import fcntl
import marshal
import os
import signal
import socket
import struct
import sys

sup = sys.modules["_mleforge_supervisor"]

RUN_ID_SLOT = b"-" * 16  # as long as a run id (secrets.token_hex(8))
RUN_ID_VAR = b"MLEFORGE_RUN_ID="
ROLES = {  # all as long as the first: they are written over it in place
    "zygote": b"mleforge-zygote--", "shim": b"mleforge-run-shim", "init": b"mleforge-run-init",
    "main": b"mleforge-run-main",
}
ROOT = "/mleforge"  # bwrap.ZYGOTE_ROOT
WORKSPACE = "/workspace"  # bwrap.SANDBOX_WORKSPACE
STATUS_FD, CHANNEL_FD = 3, 4  # where a run's descriptors are put (0-2: stdio)

CLONE_NEWNS, CLONE_NEWCGROUP, CLONE_NEWUTS = 0x00020000, 0x02000000, 0x04000000
CLONE_NEWIPC, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x08000000, 0x10000000, 0x20000000, 0x40000000
SANDBOX_UID = 65534  # bwrap.SANDBOX_UID: the one uid of a run's user namespace
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_CHILD_SUBREAPER = 1, 4, 36
PR_CAPBSET_DROP, PR_SET_SECUREBITS, PR_SET_NO_NEW_PRIVS, PR_CAP_AMBIENT = 24, 28, 38, 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
# noroot, no_setuid_fixup and no_cap_ambient_raise, and keep_caps off: each locked
SECUREBITS_LOCKED = 0xEF
LINUX_CAPABILITY_VERSION_3 = 0x20080522
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 1

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def _mount(source, target: str, fstype, flags: int, data=None) -> None:
    def b(value):
        return value.encode() if isinstance(value, str) else value

    _check(_libc.mount(b(source), b(target), b(fstype), flags, b(data)), f"mount {target}")


def _prctl(option: int, value: int) -> None:
    _check(_libc.prctl(option, value, 0, 0, 0), f"prctl {option}")


# -- the zygote ---------------------------------------------------------------------


def serve(ctl: socket.socket) -> None:
    config = marshal.loads(ctl.recv(1 << 20))
    loaded, failed = _preload(config["preload"])
    status = _vm_status()
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernel reaps the shims
    ctl.send(marshal.dumps({
        "event": "ready", "pid": os.getpid(), "loaded": loaded, "failed": failed,
        "data_kb": status.get("VmData", 0), "size_kb": status.get("VmSize", 0),
        "rss_kb": status.get("VmRSS", 0),
    }))
    slots = _slots()
    zygote = os.getpid()
    while True:
        message, fds, _flags, _addr = socket.recv_fds(ctl, 1 << 20, 8)
        if not message:  # the executor closed the pool, or died: in-flight runs die with us
            os._exit(0)
        try:
            request = marshal.loads(message)
        except (EOFError, ValueError, TypeError):
            request = None
        if request is None or len(fds) != 4:
            for fd in fds:
                os.close(fd)
            continue
        if os.fork() == 0:
            _shim(ctl, zygote, request, fds, slots, config)  # returns only by SystemExit from a script
        for fd in fds:
            os.close(fd)


def _preload(modules) -> tuple[list, dict]:
    import importlib

    loaded, failed = [], {}
    for name in modules:
        try:
            importlib.import_module(name)
            loaded.append(name)
        except Exception as exc:  # a missing optional library only costs its warm start
            failed[name] = f"{type(exc).__name__}: {exc}"
    import gc

    # Out of the collector's sight: a run's collections then neither walk the preloaded
    # objects nor copy every page they live on.
    gc.freeze()
    return loaded, failed


def _vm_status() -> dict:
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmData", "VmSize"):
                out[key] = int(value.split()[0])
    return out


def _slots() -> dict:
    """Addresses of the run id and role slots in our argv and environment blocks."""
    with open("/proc/self/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # proc(5) numbers these 48-51; the split starts at field 3.
    arg_start, arg_end, env_start, env_end = (int(v) for v in fields[45:49])
    args = ctypes.string_at(arg_start, arg_end - arg_start)
    env = ctypes.string_at(env_start, env_end - env_start)
    slots = {}
    at = args.find(b"\0" + RUN_ID_SLOT + b"\0")
    if at >= 0:
        slots["arg"] = arg_start + at + 1
    at = args.find(b"\0" + ROLES["zygote"] + b"\0")
    if at >= 0:
        slots["role"] = arg_start + at + 1
    at = env.find(RUN_ID_VAR + RUN_ID_SLOT)
    if at >= 0:
        slots["env"] = env_start + at + len(RUN_ID_VAR)
    return slots


def _write_slot(slots: dict, name: str, value: bytes) -> None:
    if name in slots:
        ctypes.memmove(slots[name], value, len(value))


def _mark_run(slots: dict, run_id: str) -> None:
    """The run's processes (not the shim, which outlives the report) carry its id."""
    _write_slot(slots, "arg", run_id.encode())
    _write_slot(slots, "env", run_id.encode())


# -- one run --------------------------------------------------------------------------


def _shim(ctl, zygote: int, request: dict, fds: list, slots: dict, config: dict) -> None:
    """The first process of a run (trusted: it never runs a script, and keeps the
    capabilities the run gives up). Exits, or propagates a script's SystemExit."""
    ctl.close()
    _place_descriptors(fds)  # first: a failure is then reported on the channel
    try:
        _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # the zygote gone (pool closed): so are its runs
        if os.getppid() != zygote:
            os._exit(1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        os.setsid()
        channel = socket.socket(fileno=CHANNEL_FD)
        _write_slot(slots, "role", ROLES["shim"])
        os.environ.clear()
        os.environ.update(request["env"])
        isolated = config["isolated"]
        if isolated:
            _enter_namespaces(request, config)
        else:
            _prctl(PR_SET_CHILD_SUBREAPER, 1)
            os.chdir(request["workspace"])
        child = os.fork()
        if child == 0:
            _mark_run(slots, request["run_id"])
            if isolated:
                _init(request, slots, config)
            channel.close()
            _supervise(request, slots)
        pidfds = [os.pidfd_open(os.getpid()), os.pidfd_open(child)]
        socket.send_fds(channel, [b"started"], pidfds)
        for fd in pidfds:
            os.close(fd)
        # Our copies of the run's pipes must not keep them open: the executor reads to EOF.
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        os.close(null)
        os.close(STATUS_FD)
        _, wstatus, usage = os.wait4(child, 0)
        if not isolated:  # what the script left behind was handed to us, the subreaper
            sup._kill_all(child)
            _reap_all()
        code = os.waitstatus_to_exitcode(wstatus)
        channel.send(f"exit {code} {usage.ru_utime + usage.ru_stime:.6f}".encode())
    except Exception as exc:  # not SystemExit: that is a script ending (see _supervise)
        _fail(exc)
    os._exit(0)


def _fail(exc: BaseException) -> None:
    message = f"warm pool: the run could not start: {type(exc).__name__}: {exc}"
    with contextlib.suppress(OSError):
        socket.socket(fileno=CHANNEL_FD).send(b"failed " + message.encode(errors="replace"))
    os._exit(70)


def _place_descriptors(fds: list) -> None:
    """stdin /dev/null, stdout, stderr, the status pipe at 3, the channel at 4; nothing else."""
    high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 64) for fd in fds]
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    for target, fd in zip((1, 2, STATUS_FD, CHANNEL_FD), high):
        os.dup2(fd, target)
    os.closerange(CHANNEL_FD + 1, 1 << 16)


def _enter_namespaces(request: dict, config: dict) -> None:
    """New mount, pid, network, ipc, uts and cgroup namespaces (owned by a new user
    namespace first, as any user but root), and the run's view: its workspace at
    /workspace, the public data read-only in it, private /tmp and /dev/shm, its own
    passwd; the pool's folders (other runs) hidden."""
    if config["userns"]:
        _own_user_namespace()
    _check(_libc.unshare(CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS
                         | CLONE_NEWCGROUP), "unshare")
    _mount(None, "/", None, MS_REC | MS_PRIVATE)  # nothing we mount reaches the zygote
    run_dir = f"{ROOT}/{request['where']}/{request['run_id']}"
    _bind(f"{run_dir}/workspace", WORKSPACE, read_only=False)
    if config["has_input"]:
        _bind(f"{ROOT}/input", f"{WORKSPACE}/input", read_only=True)
    # Roots under /tmp (the interpreter of a checkout there) are held open before the
    # private /tmp covers them, then bound again at their own paths on top of it (the
    # executor made their mount points in the run's tmp/: we lack CAP_DAC_OVERRIDE).
    held = [(root, os.open(root, os.O_PATH | os.O_CLOEXEC)) for root in config.get("tmp_roots", ())]
    _bind(f"{run_dir}/workspace/tmp", "/tmp", read_only=False)
    for root, fd in held:
        _bind(f"/proc/self/fd/{fd}", root, read_only=True)
        os.close(fd)
    _bind(f"{run_dir}/passwd", "/etc/passwd", read_only=True)
    _bind(f"{run_dir}/group", "/etc/group", read_only=True)
    _mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, f"size={request['shm_mb']}m,mode=1777")
    # Binds keep their sources; covering the pool's root hides every other workspace.
    _mount("tmpfs", ROOT, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=4k,mode=0755")
    _check(_libc.sethostname(b"sandbox", 7), "sethostname")
    _loopback_up()


def _own_user_namespace() -> None:
    """A user namespace for this run alone, whose one uid (the sandbox user) is ours
    outside; no further user namespace may be made in it. Without capabilities in the
    zygote's namespace we may map only our own uid and gid, and must deny setgroups."""
    uid, gid = os.getuid(), os.getgid()
    _check(_libc.unshare(CLONE_NEWUSER), "unshare a user namespace")
    for name, text in (("setgroups", "deny"), ("uid_map", f"{SANDBOX_UID} {uid} 1"),
                       ("gid_map", f"{SANDBOX_UID} {gid} 1")):
        with open(f"/proc/self/{name}", "w") as f:
            f.write(text)
    # The sysctl is per user namespace: ours, which we own here. The script, with no
    # capability left in it, cannot raise it again; any unshare(CLONE_NEWUSER) below
    # fails with ENOSPC, as under bwrap's --disable-userns.
    with open("/proc/sys/user/max_user_namespaces", "w") as f:
        f.write("0")


def _drop_capabilities() -> None:
    """Every capability gone for good, without a uid change (there is one uid here):
    the bounding set (so no execve can grant one back), the ambient set, the securebits
    locked so that uid 0 would mean nothing either, then the sets themselves."""
    with open("/proc/sys/kernel/cap_last_cap") as f:
        last = int(f.read())
    for cap in range(last + 1):
        _prctl(PR_CAPBSET_DROP, cap)
    _prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL)
    _prctl(PR_SET_SECUREBITS, SECUREBITS_LOCKED)
    _clear_capability_sets()


def _clear_capability_sets() -> None:
    """Effective, permitted and inheritable sets emptied (always allowed: it only lowers)."""
    header = (ctypes.c_uint32 * 2)(LINUX_CAPABILITY_VERSION_3, 0)
    nothing = (ctypes.c_uint32 * 6)()  # effective, permitted, inheritable; two words each
    _check(_libc.capset(header, nothing), "capset")


def _bind(source: str, target: str, read_only: bool) -> None:
    _mount(source, target, None, MS_BIND | MS_REC)
    flags = MS_BIND | MS_REMOUNT | MS_NOSUID | MS_NODEV | (MS_RDONLY if read_only else 0)
    _mount(None, target, None, flags)


def _loopback_up() -> None:
    """As bwrap does: 127.0.0.1 works inside, and leads nowhere else."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        request = struct.pack("16sH22x", b"lo", 0)
        flags = struct.unpack("16sH22x", fcntl.ioctl(s, SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack("16sH22x", b"lo", flags | IFF_UP))


def _init(request: dict, slots: dict, config: dict) -> None:
    """pid 1 of the run's pid namespace. Never returns."""
    try:
        shim = os.getppid()
        os.close(CHANNEL_FD)
        _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
        if config["userns"]:
            _drop_capabilities()
        else:
            uid = request["uid"]
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)  # every capability goes with uid 0
            _clear_capability_sets()  # but the inheritable set: it goes now
        _prctl(PR_SET_NO_NEW_PRIVS, 1)  # bwrap set it for the zygote already: kept whatever happens
        # Non-dumpable, as the supervisor: with the run's uid (and no uid change, as a user, to
        # make it so) the script could otherwise ptrace us or write our /proc/1/mem, and end
        # the run with the exit status of its choice.
        _prctl(PR_SET_DUMPABLE, 0)
        # After a uid change, which clears it: the shim killed, the namespace goes with us.
        _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != shim:
            os._exit(1)
        os.chdir(WORKSPACE)
        child = os.fork()
        if child == 0:
            _supervise(request, slots)
        os.close(STATUS_FD)  # only the supervisor writes the status: nothing here to reach
        _write_slot(slots, "role", ROLES["init"])
        while True:  # signals from inside the namespace do not reach pid 1: only this ends it
            pid, wstatus = os.waitpid(-1, 0)
            if pid == child:
                break
        code = os.waitstatus_to_exitcode(wstatus)
    except Exception as exc:
        sys.stderr.write(f"warm pool: the run's init failed: {type(exc).__name__}: {exc}\n")
        os._exit(70)
    os._exit(code if code >= 0 else 128 - code)  # a signal as bwrap reports it


def _supervise(request: dict, slots: dict) -> None:
    """The supervisor, as in the local executor. Its fork that becomes the script leaves
    by SystemExit, up through every frame to the interpreter's own exit."""
    _write_slot(slots, "role", ROLES["main"])
    try:
        sup.supervise(request["config"])
    except Exception as exc:
        sys.stderr.write(f"warm pool: the supervisor failed: {type(exc).__name__}: {exc}\n")
        os._exit(70)
    os._exit(0)


def _reap_all() -> None:
    while True:
        try:
            os.wait4(-1, 0)
        except ChildProcessError:
            return
