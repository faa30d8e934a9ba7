"""Giving memory back to the operating system after a phase that allocated much and freed it.

    release_memory()    gc.collect(), then glibc's malloc_trim(0) where the C library is glibc

Freed Python and numpy buffers of a few MB each often stay in the C allocator's heap (glibc
raises its mmap threshold as large blocks are freed, so later large blocks come from the heap),
and a heap is returned to the system only from its top: a converted model's worth of freed
buffers can stay resident for the rest of the run. malloc_trim returns every free page.
Objects freed only by the cycle collector (a Trainer and its callbacks) need gc.collect() first.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import sys
from functools import lru_cache
from typing import Any


@lru_cache(maxsize=1)
def _libc() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None
    return libc if hasattr(libc, "malloc_trim") else None  # musl has none


def release_memory() -> bool:
    """Collect garbage and return the C heap's free pages to the system; whether it trimmed."""
    gc.collect()
    libc = _libc()
    if libc is None:
        return False
    libc.malloc_trim(0)
    return True
