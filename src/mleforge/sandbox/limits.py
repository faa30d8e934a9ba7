"""What one execution may use: the task's `Limits` plus the sandbox's own knobs."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from mleforge.errors import ConfigError
from mleforge.tasks.spec import Limits

MIB = 1 << 20


@dataclass(frozen=True)
class RunLimits:
    """Resources of one run. The first three come from the task (`task.yaml` `limits`).

    memory_mb is enforced as RLIMIT_DATA (heap and private mappings: what a script
    really allocates); address space (RLIMIT_AS) gets generous headroom because
    thread stacks, BLAS arenas and allocator reservations count there without
    being used.

    Both limits bind the whole run, not one process, the same as root and as any
    user (no cgroup needed; the one machine this was built on has cgroup v1, where
    root may make a memory cgroup and a user may not, and cgroup v2 delegation is
    rare for users). The executor polls every half second (process.py) and kills a
    run over either, reported as killed_by "memory" or "disk":

    - memory: the proportional set size of all the run's processes (shared pages
      counted once across them) plus what its private /dev/shm holds (a tmpfs of
      its own, whose pages no resident set shows); memory_mb + 128 MiB of slack for
      the interpreters. What no poll could see is refused in the sandbox (the run's
      seccomp filter, seccomp.py): memfd_create and System V shared memory. /dev
      itself is read-only.
    - disk: every file and folder the workspace walk finds (the workspace, /tmp in
      the sandbox), plus the files on its file system that no name reaches but a
      process of the run holds open or mapped (unlinked while open, O_TMPFILE).

    What is left: a descriptor in flight in a unix socket (SCM_RIGHTS) is held by no
    process, so an unlinked file kept only that way is not counted (at most
    RLIMIT_NOFILE such files, each at most file_size_mb); pipe and socket buffers
    are bounded only by the kernel's per-user limits; and between two polls a run
    may pass a limit for half a second. Unisolated runs (isolation "none") get the
    polls but not the filter, and share the host's /dev/shm, which is not counted.
    """

    timeout_s: float = 600.0
    memory_mb: int = 4096
    cpus: int = 2
    cpu_s: float | None = None  # RLIMIT_CPU per process; None: timeout_s * cpus + 5
    address_space_mb: int | None = None  # RLIMIT_AS; None: 2 * memory_mb + 4096; 0: unlimited
    disk_mb: int = 8192  # everything written in the workspace (including /tmp), polled
    max_files: int = 100_000  # files and folders in the workspace, polled with disk_mb
    file_size_mb: int | None = None  # RLIMIT_FSIZE; None: disk_mb
    nofile: int = 1024  # RLIMIT_NOFILE
    nproc: int = 512  # processes and threads in the sandbox (RLIMIT_NPROC)
    output_head_bytes: int = 32 * 1024  # kept from the start of each stream
    output_tail_bytes: int = 32 * 1024  # kept from the end of each stream
    output_limit_bytes: int = 64 * MIB  # per stream; a run that writes more is killed
    kill_grace_s: float = 2.0  # the parent's backstop after the in-sandbox timeout

    def __post_init__(self) -> None:
        positive = {
            "timeout_s": self.timeout_s, "memory_mb": self.memory_mb, "cpus": self.cpus,
            "disk_mb": self.disk_mb, "max_files": self.max_files, "nofile": self.nofile, "nproc": self.nproc,
            "output_limit_bytes": self.output_limit_bytes,
        }
        for name, value in positive.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise ConfigError(f"RunLimits.{name} must be a positive number; got {value!r}")
        for name in ("cpu_s", "file_size_mb"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ConfigError(f"RunLimits.{name} must be positive or None (derived); got {value!r}")
        if self.address_space_mb is not None and self.address_space_mb < 0:
            raise ConfigError(f"RunLimits.address_space_mb must be >= 0 (0: unlimited); got {self.address_space_mb}")
        for name in ("output_head_bytes", "output_tail_bytes", "kill_grace_s"):
            if getattr(self, name) < 0:
                raise ConfigError(f"RunLimits.{name} must be >= 0; got {getattr(self, name)!r}")
        if self.nofile < 16:
            raise ConfigError(f"RunLimits.nofile={self.nofile} is too small for Python to start; use >= 16")

    @classmethod
    def of(cls, limits: RunLimits | Limits | None, default: Limits | None = None, **overrides: Any) -> RunLimits:
        """RunLimits from a RunLimits, a task's Limits, or None (then `default`), with overrides."""
        if limits is None:
            limits = default or Limits()
        if isinstance(limits, Limits):
            limits = cls(timeout_s=float(limits.timeout_s), memory_mb=limits.memory_mb, cpus=limits.cpus)
        if not isinstance(limits, RunLimits):
            raise ConfigError(f"limits must be RunLimits, Limits or None; got {type(limits).__name__}")
        overrides = {k: v for k, v in overrides.items() if v is not None}
        return dataclasses.replace(limits, **overrides) if overrides else limits

    @property
    def effective_cpu_s(self) -> int:
        return int(self.cpu_s if self.cpu_s is not None else self.timeout_s * self.cpus + 5)

    @property
    def effective_address_space_mb(self) -> int:
        """0 means unlimited."""
        if self.address_space_mb is not None:
            return self.address_space_mb
        return 2 * self.memory_mb + 4096

    @property
    def effective_file_size_mb(self) -> int:
        return self.file_size_mb if self.file_size_mb is not None else self.disk_mb

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunLimits:
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})
