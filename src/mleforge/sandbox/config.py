"""Where a run's scripts execute: the sandbox backend, its isolation, how many at once, the
result cache and a script's time cap (mleforge.sandbox.factory builds the executor)."""

from __future__ import annotations

from dataclasses import dataclass, field

from mleforge import config as check

EXECUTORS = ("auto", "local", "pool", "ray")  # auto: the warm pool as root (isolated there), else local
ISOLATIONS = ("auto", "bwrap", "none")
ISOLATION_HELP = (
    "auto or bwrap: every script in a bwrap sandbox (the system's bwrap, else the bundled one), or an error "
    "saying why it cannot be used here; none: NO sandbox, a script can read the answers, your files and the "
    "environment and use the network (only for code you trust) (none given: $MLEFORGE_ISOLATION, else auto)"
)


@dataclass(frozen=True)
class SandboxConfig:
    """The executor of a run's scripts. run_timeout_s caps a script below the task's own limit:
    a training step waits for its slowest run."""

    executor: str = field(default="auto", metadata={
        "choices": EXECUTORS, "aliases": ("--executor",),
        "help": "sandbox backend (auto: the warm pool as root, else local)"})
    isolation: str | None = field(default=None, metadata={
        "choices": ISOLATIONS, "aliases": ("--isolation",), "help": ISOLATION_HELP})
    exec_workers: int | None = field(default=None, metadata={
        "aliases": ("--exec-workers",), "help": "scripts executed at once (none: CPUs / task CPUs)"})
    cache: bool = field(default=True, metadata={
        "help": "reuse the result of a script already run on the same task (results.sqlite)"})
    run_timeout_s: float | None = field(default=120.0, metadata={
        "help": "a script's time cap in seconds (none: the task's own limit)"})

    def __post_init__(self) -> None:
        check.choice("sandbox.executor", self.executor, EXECUTORS)
        check.choice("sandbox.isolation", self.isolation, ISOLATIONS, optional=True)
        check.integer("sandbox.exec_workers", self.exec_workers, 1, optional=True)
        check.flag("sandbox.cache", self.cache)
        check.number("sandbox.run_timeout_s", self.run_timeout_s, low=0.0, strict=True, optional=True)
