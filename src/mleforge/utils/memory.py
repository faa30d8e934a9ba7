"""Giving memory back to the operating system.

    release_memory()               gc.collect(), then glibc's malloc_trim(0) where the C library is glibc
    release_file_pages(tensors)    drop the resident pages of memory-mapped weights nobody wrote to
    file_backed_tensors(tensors)   whether they all are such weights (unwritten pages of file mappings)
    filesystem_type(path)          the type of the filesystem a path is on ("ext4", "tmpfs", ...)

Freed Python and numpy buffers of a few MB each often stay in the C allocator's heap (glibc
raises its mmap threshold as large blocks are freed, so later large blocks come from the heap),
and a heap is returned to the system only from its top: a converted model's worth of freed
buffers can stay resident for the rest of the run. malloc_trim returns every free page.
Objects freed only by the cycle collector (a Trainer and its callbacks) need gc.collect() first.
"""

from __future__ import annotations

import bisect
import ctypes
import ctypes.util
import gc
import logging
import os
import re
import sys
from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path
from typing import Any, NamedTuple

log = logging.getLogger(__name__)
MADV_DONTNEED = 4  # Linux's value on every architecture this runs on


@lru_cache(maxsize=1)
def _libc() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None
    return libc if hasattr(libc, "malloc_trim") else None  # musl has none


@lru_cache(maxsize=1)
def _madvise() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    except OSError:
        return None
    madvise = libc.madvise
    madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    madvise.restype = ctypes.c_int
    return madvise


def release_memory() -> bool:
    """Collect garbage and return the C heap's free pages to the system; whether it trimmed."""
    gc.collect()
    libc = _libc()
    if libc is None:
        return False
    libc.malloc_trim(0)
    return True


SMAPS_FIELDS = {"Rss:": 3, "Anonymous:": 4, "Swap:": 5}  # their place in a FileMapping


class FileMapping(NamedTuple):
    """One memory mapping of a file, from /proc/self/smaps (sizes in bytes)."""

    start: int
    end: int
    path: str
    rss: int
    anonymous: int  # pages of it written since it was mapped (private copies): not the file's
    swap: int = 0  # written pages of it that were swapped out: not the file's either

    @property
    def written(self) -> bool:
        """Whether a page of it was written since it was mapped (in memory or swapped out)."""
        return bool(self.anonymous or self.swap)


def file_mappings() -> list[FileMapping]:
    """This process's mappings of regular files, by address ([] off Linux)."""
    try:
        lines = open("/proc/self/smaps").read().splitlines()  # noqa: SIM115 (one read, then parse)
    except OSError:
        return []
    found: list[FileMapping] = []
    current: list[Any] | None = None
    for line in lines:
        head, _, rest = line.partition(" ")
        if "-" in head and not head.endswith(":"):  # a mapping's header: start-end perms offset dev inode path
            fields = rest.split(None, 4)
            path = fields[4] if len(fields) > 4 else ""
            if current is not None:
                found.append(FileMapping(*current))
            start, _, end = head.partition("-")
            # Regular files only: not anonymous memory, [heap] or [stack], devices, memfd or SysV
            # shared memory (their pages are memory whatever the mapping).
            regular = path.startswith("/") and not path.startswith(("/dev/", "/memfd:", "/SYSV"))
            current = [int(start, 16), int(end, 16), path, 0, 0, 0] if regular else None
        elif current is not None and head in SMAPS_FIELDS:
            current[SMAPS_FIELDS[head]] = int(rest.split()[0]) * 1024
    if current is not None:
        found.append(FileMapping(*current))
    return found


def _holding(tensors: Iterable[Any]) -> list[int]:
    """The sorted start addresses of the CPU tensors' storages (empty ones left out)."""
    return sorted({t.untyped_storage().data_ptr() for t in tensors
                   if t.device.type == "cpu" and t.untyped_storage().nbytes()})


def _mappings_holding(pointers: list[int]) -> tuple[list[FileMapping], int]:
    """The file mappings that hold some of `pointers`, and how many pointers none holds."""
    held, found = set(), []
    for mapping in file_mappings():
        i = bisect.bisect_left(pointers, mapping.start)
        first = i
        while i < len(pointers) and pointers[i] < mapping.end:
            held.add(pointers[i])
            i += 1
        if i > first:
            found.append(mapping)
    return found, len(pointers) - len(held)


def file_backed_tensors(tensors: Iterable[Any]) -> bool:
    """Whether every CPU tensor of `tensors` lies in a file mapping no page of which was written
    (weights transformers memory-mapped from a safetensors file and kept as they are). False
    off Linux, and for a tensor in the process's own memory (cast, merged or computed)."""
    pointers = _holding(tensors)
    if not pointers:
        return False
    mappings, outside = _mappings_holding(pointers)
    return not outside and not any(m.written for m in mappings)


def filesystem_type(path: str | Path) -> str | None:
    """The type of the filesystem `path` is on, from /proc/self/mounts (the longest mount point
    above it): "ext4", "xfs", "tmpfs", ...; None off Linux."""
    try:
        with open("/proc/self/mounts", encoding="utf-8", errors="surrogateescape") as f:
            mounts = f.read().splitlines()
    except OSError:
        return None
    target = os.path.realpath(path)
    best, kind = "", None
    for line in mounts:
        fields = line.split()
        if len(fields) < 3:
            continue
        # the kernel writes a space, tab, newline and backslash in a mount point as octal escapes
        point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), fields[1])
        inside = target == point or target.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best):
            best, kind = point, fields[2]
    return kind


def release_file_pages(tensors: Iterable[Any]) -> int:
    """Drop from this process's resident set the pages of the file mappings that hold `tensors`
    (weights transformers loaded by memory-mapping a safetensors file), where no page of the
    mapping was written since it was mapped; the bytes that left the resident set (0 off Linux).

    Nothing is lost: an unwritten page of a file mapping is the file's, and the next read maps
    it again from the page cache (from the disk where the kernel reclaimed the cache meanwhile),
    bit for bit. A mapping with a written page, in memory or swapped out (a private copy, which
    dropping would undo), is left whole; the caller makes sure that no thread writes to the
    tensors meanwhile. What a GRPO step on a CPU calls before its rollouts generate: the training
    model's frozen weights are not read while the rollout engine, which holds its own copy,
    samples (mleforge.train.grpo.ct2_rollout).

    What leaves is the process's mapping, not the memory: the pages stay in the page cache,
    which the kernel gives to whoever needs memory; what the weights on a file save is that they
    are reclaimable where private memory is not.
    """
    madvise = _madvise()
    if madvise is None:
        return 0
    pointers = _holding(tensors)
    if not pointers:
        return 0
    released = 0
    for mapping in _mappings_holding(pointers)[0]:
        if not mapping.rss:
            continue
        if mapping.written:
            log.debug("%s: %d bytes of it were written; its pages stay", mapping.path,
                      mapping.anonymous + mapping.swap)
            continue
        if madvise(mapping.start, mapping.end - mapping.start, MADV_DONTNEED) == 0:
            released += mapping.rss
        else:
            log.debug("madvise(%s) failed: errno %d", mapping.path, ctypes.get_errno())
    return released
