"""`make_executor(kind)`: a sandbox backend by name, imported only when asked for."""

from __future__ import annotations

import logging
from typing import Any

from mleforge.errors import ConfigError, SandboxError
from mleforge.sandbox.executor import Executor

log = logging.getLogger("mleforge.sandbox")

# auto: the warm pool wherever it isolates its runs as asked, else local (see _pool_else_local).
EXECUTOR_KINDS = ("local", "pool", "ray", "auto")


def make_executor(kind: str = "local", **options: Any) -> Executor:
    """An executor by name; `options` go to its constructor (e.g. isolation="bwrap")."""
    if kind == "auto":
        return _pool_else_local(options)
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


def _pool_else_local(options: dict[str, Any]) -> Executor:
    """The warm pool wherever it isolates its runs as asked (as root, and as any user where
    bwrap may make a user namespace inside its sandbox: its probe is a real run), else the
    local executor, a bwrap per run at the cost of interpreter start-up (which raises in
    turn where nothing can isolate a run: never silently unisolated)."""
    pool = make_executor("pool", **options)
    try:
        pool.resolve_isolation()
        return pool
    except SandboxError as exc:
        pool.close()
        log.info("the warm pool cannot isolate runs here (%s); using the local executor", exc)
    except BaseException:  # anything else (a bug, Ctrl-C) still stops the pool's zygote
        pool.close()
        raise
    return make_executor("local", **options)


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
