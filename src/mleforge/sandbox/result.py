"""ExecutionResult: what one run of a script produced, and why it ended."""

from __future__ import annotations

import dataclasses
import re
import signal
from dataclasses import dataclass, field
from typing import Any

# Why a run was ended by someone other than the script itself.
KILLED_BY = (
    "timeout",  # the wall-clock limit
    "memory",  # an allocation failed at the memory limit (MemoryError, bad_alloc, ENOMEM)
    "cpu",  # RLIMIT_CPU (SIGXCPU)
    "disk",  # the workspace outgrew disk_mb, or a file hit RLIMIT_FSIZE (SIGXFSZ)
    "output",  # stdout or stderr passed output_limit_bytes
    "signal",  # any other signal, including one the script sent itself
    "cancelled",  # the caller cancelled the run
)
ISOLATIONS = ("bwrap", "none")


@dataclass(frozen=True)
class ExecutionResult:
    """One run. `stdout`/`stderr` keep the head and tail of each stream (decoded with
    replacement characters); `*_bytes` count everything the script wrote.

    `submission_path` is set only when the script left a regular file at
    `submission/submission.csv`; it then lies outside the (removed) workspace, for
    the grader to read in the parent. `ok` says nothing about the submission's
    quality: only grading does.
    """

    run_id: str
    task_id: str
    returncode: int | None  # the exit status when the script exited; None when a signal ended it
    signal: int | None  # the signal that ended it, if any
    timed_out: bool
    killed_by: str | None  # one of KILLED_BY, or None when the script ended on its own
    wall_s: float
    cpu_s: float  # user + system, of the script and its reaped descendants
    peak_memory_mb: float  # the largest resident set of the script or a descendant
    stdout: str
    stderr: str
    stdout_bytes: int
    stderr_bytes: int
    submission_path: str | None
    isolation: str  # "bwrap" or "none"
    warnings: tuple[str, ...] = ()
    bwrap: str | None = None  # the bwrap binary that isolated the run (path)
    bwrap_version: str | None = None  # its version, "0.11.0"
    # The script's Landlock domain in this run: the executor's record of it (seccomp.landlock_status())
    # when the supervisor entered it, "off (...)" with the reason when it could not; None without bwrap.
    landlock: str | None = None
    workspace: str | None = None  # kept workspaces only
    script_sha256: str = ""
    limits: dict[str, Any] = field(default_factory=dict)
    cached: bool = False  # a result cache's copy of an earlier identical run (sandbox/caching_executor.py)

    @property
    def ok(self) -> bool:
        """The script exited with status 0 on its own."""
        return self.returncode == 0 and self.killed_by is None

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["warnings"] = list(self.warnings)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ExecutionResult:
        known = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        values["warnings"] = tuple(values.get("warnings") or ())
        values["limits"] = dict(values.get("limits") or {})
        return cls(**values)


# What allocation failures print: Python, numpy, C++ and C libraries.
MEMORY_MESSAGES = re.compile(
    r"MemoryError|Unable to allocate|std::bad_alloc|Cannot allocate memory|[Oo]ut of memory"
)


def killed_by_of(
    *,
    parent_reason: str | None,
    timed_out: bool,
    returncode: int | None,
    signal_number: int | None,
    cpu_s: float,
    cpu_limit_s: float,
    stderr_tail: str,
) -> str | None:
    """Why a run ended, from what the parent and the supervisor saw.

    Memory is recognised from the message of the failed allocation (RLIMIT_DATA
    makes allocations fail rather than the process die): a script that prints
    "MemoryError" and fails on its own is counted as a memory failure too.
    """
    if parent_reason is not None:
        return parent_reason
    if timed_out:
        return "timeout"
    if signal_number == signal.SIGXCPU or (signal_number == signal.SIGKILL and cpu_s >= cpu_limit_s - 0.5):
        return "cpu"
    if signal_number == signal.SIGXFSZ:
        return "disk"
    failed = signal_number is not None or returncode not in (0, None)
    if failed and MEMORY_MESSAGES.search(stderr_tail):
        return "memory"
    if signal_number is not None:
        return "signal"
    return None
