"""Where mleforge keeps data on disk."""

from __future__ import annotations

import os
from pathlib import Path

DATA_ENV = "MLEFORGE_DATA"


def data_root() -> Path:
    """The root under which each task's data lives (`<root>/<task id>/prepared/...`).

    `MLEFORGE_DATA` overrides the default `~/.cache/mleforge/data`.
    """
    override = os.environ.get(DATA_ENV)
    if override:
        return Path(override).expanduser().resolve()
    return Path.home() / ".cache" / "mleforge" / "data"
