"""A policy that many threads share: one `generate` at a time unless its kind is thread-safe.

Local models hold one model and one engine; an HTTP policy (openai) serves concurrent calls.
"""

from __future__ import annotations

import threading
from typing import Any

# Policy kinds (spec prefixes) whose generate may be entered by several threads at once.
THREAD_SAFE_PREFIXES = ("openai",)


class SerializedPolicy:
    """A policy whose `generate` is entered by one thread at a time."""

    def __init__(self, policy: Any):
        self.policy = policy
        self._lock = threading.Lock()

    def generate(self, *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            return self.policy.generate(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.policy, name)
