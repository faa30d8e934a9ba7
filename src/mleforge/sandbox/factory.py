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
