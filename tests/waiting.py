"""Polling for things that happen soon after an event (a killed process's children
exiting, a worker handing its CPUs back). The deadline is generous because a loaded
CI machine can be slow; a condition that holds returns at once, so it costs nothing."""

from __future__ import annotations

import time
from collections.abc import Callable

DEADLINE_S = 30.0


def wait_for(condition: Callable[[], object], timeout_s: float = DEADLINE_S, interval_s: float = 0.05) -> bool:
    """Poll `condition` until it is true or `timeout_s` has passed; its last truth value."""
    deadline = time.monotonic() + timeout_s
    while True:
        if condition():
            return True
        if time.monotonic() >= deadline:
            return bool(condition())
        time.sleep(interval_s)
