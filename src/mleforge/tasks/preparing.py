"""Deprecated: the old name of the task-author helpers; import them from
`mleforge.tasks.authoring` (this name goes in mleforge 0.3).

Each name warns (DeprecationWarning) where a task's file takes it, so the warning points at
the line to change; mleforge shows such warnings from task folders' own files
(mleforge.tasks.loading).
"""

from __future__ import annotations

import warnings
from typing import Any

from mleforge.tasks import authoring

MOVED = ("split_frame", "shuffled", "write_csv")  # what the old module held
__all__ = ["shuffled", "split_frame", "write_csv"]  # noqa: F822 (given by __getattr__)


def __getattr__(name: str) -> Any:
    if name in MOVED:
        warnings.warn(f"mleforge.tasks.preparing is deprecated and goes in mleforge 0.3; import {name} from "
                      f"mleforge.tasks.authoring instead", DeprecationWarning, stacklevel=2)
        return getattr(authoring, name)
    raise AttributeError(f"module 'mleforge.tasks.preparing' has no attribute {name!r}; the task-author API is "
                         f"mleforge.tasks.authoring ({', '.join(authoring.__all__)})")


def __dir__() -> list[str]:
    return sorted(MOVED)
