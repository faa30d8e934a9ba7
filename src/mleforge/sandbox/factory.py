"""`make_executor(kind)`: a sandbox backend by name, imported only when asked for."""

from __future__ import annotations

from typing import Any

from mleforge.errors import ConfigError
from mleforge.sandbox.executor import Executor

EXECUTOR_KINDS = ("local", "pool", "ray")


def make_executor(kind: str = "local", **options: Any) -> Executor:
    """An executor by name; `options` go to its constructor (e.g. isolation="bwrap")."""
    if kind == "local":
        from mleforge.sandbox.local import LocalExecutor

        return LocalExecutor(**options)
    if kind == "pool":
        from mleforge.sandbox.pool.executor import PoolExecutor

        return PoolExecutor(**options)
    if kind == "ray":
        from mleforge.sandbox.ray_executor import RayExecutor

        return RayExecutor(**options)
    raise ConfigError(f"unknown executor {kind!r}; available: {', '.join(EXECUTOR_KINDS)}")


def describe_isolation(executor: Any) -> dict[str, Any]:
    """How `executor` isolates its runs, for run configs, eval aggregates and reports:
    {"kind": "bwrap", "bwrap": path, "bwrap_version": "0.11.0", "bwrap_source": ..., "summary": ...}.
    Resolving it runs the executor's bwrap probe (once); a SandboxError from a bwrap
    that does not work here propagates: nothing should run then anyway."""
    inner = getattr(executor, "inner", None)  # a CachingExecutor
    if inner is not None:
        return describe_isolation(inner)
    resolve = getattr(executor, "resolve_isolation", None)
    if resolve is not None:
        isolation = resolve()
        return {**isolation.to_dict(), "summary": isolation.describe()}
    kind = str(getattr(executor, "isolation", "unknown"))
    return {"kind": kind, "summary": kind}
