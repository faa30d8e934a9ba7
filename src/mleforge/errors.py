"""The one exception tree of mleforge.

Every message says what was wrong and what to do about it.
"""

from __future__ import annotations


class MleforgeError(Exception):
    """Base of every error mleforge raises on purpose."""


class ConfigError(MleforgeError):
    """A configuration value or file is malformed."""


class TaskSpecError(ConfigError):
    """A task folder or its `task.yaml` is malformed."""

    def __init__(self, path, key: str | None, problem: str):
        self.path = str(path)
        self.key = key
        self.problem = problem
        where = f"{self.path}: key `{key}`" if key else self.path
        super().__init__(f"{where}: {problem}")


class TaskNotFound(MleforgeError):
    """No registered task has the requested id."""


class DataNotPrepared(MleforgeError):
    """A task's data is missing, half-written or corrupted."""


class PreparationError(MleforgeError):
    """A task's preparer failed or wrote something it must not."""


class MissingExtra(MleforgeError):
    """An optional dependency is needed but not installed."""

    def __init__(self, package: str, extra: str, purpose: str):
        super().__init__(
            f"{purpose} needs the `{package}` package, which is not installed. "
            f"Install it with: pip install 'mleforge[{extra}]'"
        )


class InvalidSubmission(MleforgeError):
    """A submission cannot be graded; `reason` says exactly why.

    This is the agent's fault (a missing file, a wrong column...). A grader that
    fails on a submission makes it invalid too (grading is total: nothing a script
    writes stops a trainer), but its report keeps the exception in `grader_error`,
    so a grader bug stays distinguishable; a task that cannot be graded at all (its
    grade function does not load) still raises.
    """

    def __init__(self, reason: str):
        self.reason = reason
        super().__init__(reason)


class GraderError(MleforgeError):
    """A grade function failed on a submission for a reason that is not the submission's."""


class SandboxError(MleforgeError):
    """The sandbox itself failed (could not start, set up or clean up), not the script it runs.

    A script's own failures (a crash, a timeout, a memory limit) are reported in its
    ExecutionResult; this error means no trustworthy result exists.
    """
