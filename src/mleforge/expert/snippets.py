"""The script's parts are text with $NAME placeholders (string.Template: the code has no `$`)."""

from __future__ import annotations

import string
from typing import Any


def fill(template: str, **values: Any) -> str:
    return string.Template(template).substitute({k: str(v) for k, v in values.items()})
