"""Running untrusted scripts: workspaces, limits, isolation, and one Executor protocol.

    from mleforge.sandbox import make_executor
    with make_executor("local") as executor:
        result = executor.run(script, task)          # an ExecutionResult
        if result.submission_path:
            report = grade(task, result.submission_path)   # in the parent, never inside

Scripts run with the workspace as their cwd: they read `input/` (the task's
public data, read-only) and write `submission/submission.csv`.
"""

from mleforge.sandbox.executor import EXECUTOR_KINDS, Executor, make_executor
from mleforge.sandbox.limits import RunLimits
from mleforge.sandbox.result import KILLED_BY, ExecutionResult

__all__ = ["EXECUTOR_KINDS", "KILLED_BY", "ExecutionResult", "Executor", "RunLimits", "make_executor"]
