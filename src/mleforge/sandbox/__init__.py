"""Running untrusted scripts: workspaces, limits, isolation, and one Executor protocol.

    from mleforge.sandbox import make_executor
    with make_executor("local") as executor:
        result = executor.run(script, task)          # an ExecutionResult
        if result.submission_path:
            report = grade(task, result.submission_path)   # in the parent, never inside

Scripts run with the workspace as their cwd: they read `input/` (the task's
public data, read-only) and write `submission/submission.csv`.

Executors (`make_executor(kind)`): `local` (a process tree per run, under bwrap
where it works), `pool` (every run forked from a zygote that has already
imported numpy, pandas and scikit-learn; pool/executor.py says how it is isolated) and
`ray` (one Ray task per run, the local executor on the node; `pip install
'mleforge[ray]'`); `auto` is the warm pool wherever it isolates its runs as
asked, else local. Any of them can sit behind a `CachingExecutor`, which turns
an identical earlier run into a lookup in a SQLite `ResultCache`.
"""

from mleforge.sandbox.caching_executor import CachingExecutor
from mleforge.sandbox.executor import Executor
from mleforge.sandbox.factory import EXECUTOR_KINDS, describe_isolation, make_executor
from mleforge.sandbox.limits import RunLimits
from mleforge.sandbox.result import KILLED_BY, ExecutionResult
from mleforge.sandbox.result_cache import ResultCache

__all__ = [
    "EXECUTOR_KINDS", "KILLED_BY", "CachingExecutor", "ExecutionResult", "Executor", "ResultCache", "RunLimits",
    "describe_isolation", "make_executor",
]
