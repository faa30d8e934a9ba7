"""A content-addressed cache of execution results, in SQLite: an identical run costs a lookup.

The key is the sha256 of the canonical JSON of everything a run's outcome depends
on: the cache format, the task id and the checksum of its public data, the
script's sha256, the limits, the executor (kind and isolation) and the
environment (interpreter and library versions). The value is the
ExecutionResult as JSON plus the submission file's bytes.

What is cached: every run that ended, on its own or at a limit in the key
(timeout, memory, CPU, disk, output). A script is thus treated as a function of
its inputs: one whose outcome depends on chance or on the machine's load gets
one draw. Never cached: cancelled runs, runs the executor could not account for
(a process survived SIGKILL), kept workspaces (the caller wants a real one), and
infrastructure failures (they raise SandboxError and return nothing).

Bounded if asked (`max_mb`): past the bound, the least recently used entries go
first (a hit counts as a use). Safe under concurrent writers (WAL, one short
transaction per write, a busy timeout) and never trusted blindly: each row carries a checksum over its key,
its result and its submission; a row that fails it, or does not parse, is
dropped with a warning; a database SQLite reports as damaged is moved aside
and rebuilt empty.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import functools
import hashlib
import json
import logging
import os
import sqlite3
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mleforge.errors import SandboxError
from mleforge.sandbox.result import ExecutionResult

log = logging.getLogger("mleforge.sandbox")

CACHE_FORMAT = 2  # 2: size and last_used, for the bound
BUSY_TIMEOUT_S = 60.0
ENVIRONMENT_PACKAGES = ("numpy", "pandas", "scikit-learn", "scipy")
_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS results (
    key TEXT PRIMARY KEY,          -- sha256 of key_json
    key_json TEXT NOT NULL,
    result_json TEXT NOT NULL,
    submission BLOB,               -- NULL: the run left no submission
    checksum TEXT NOT NULL,        -- over key_json, result_json and submission
    created_at REAL NOT NULL,
    size INTEGER NOT NULL,         -- bytes of key_json, result_json and submission
    last_used REAL NOT NULL        -- written, or last returned by get
);
CREATE INDEX IF NOT EXISTS results_last_used ON results (last_used);
"""


@dataclass(frozen=True)
class CacheKey:
    task_id: str
    data_checksum: str  # of the task's public data
    script_sha256: str
    limits: dict[str, Any]
    executor: str  # "<kind>:<isolation>"
    environment: str  # the interpreter and library versions that run scripts

    def to_json(self) -> str:
        return json.dumps({"format": CACHE_FORMAT, **dataclasses.asdict(self)}, sort_keys=True, separators=(",", ":"))

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.to_json().encode()).hexdigest()


@dataclass(frozen=True)
class CachedRun:
    result: ExecutionResult
    submission: bytes | None


def cacheable(result: ExecutionResult) -> bool:
    """Runs whose outcome follows from the key (see the module docstring)."""
    if result.killed_by == "cancelled" or result.workspace is not None:
        return False
    return not any("survived SIGKILL" in w for w in result.warnings)


@functools.lru_cache(maxsize=4)
def environment_fingerprint(python: str) -> str:
    """The interpreter that runs scripts and the versions of the libraries they use
    (as installed here): a new scikit-learn may change every result."""
    from importlib import metadata

    versions = []
    for name in ENVIRONMENT_PACKAGES:
        try:
            versions.append(f"{name}=={metadata.version(name)}")
        except metadata.PackageNotFoundError:
            versions.append(f"{name}=none")
    return f"{os.path.realpath(python)} {sys.version.split()[0]} " + " ".join(versions)


class ResultCache:
    """The SQLite file at `path` (created if missing). Thread- and process-safe: every
    operation opens its own connection. `max_mb`: keep the entries' total size under
    this, evicting the least recently used (None: unbounded)."""

    def __init__(self, path: str | Path, max_mb: float | None = None):
        if max_mb is not None and not max_mb > 0:
            raise SandboxError(f"a result cache's max_mb must be > 0 (leave it out for no bound); got {max_mb}")
        self.path = Path(path).expanduser()
        self.max_bytes = None if max_mb is None else int(max_mb * 1024 * 1024)
        self.evicted = 0
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.rebuilds = 0
        with self._locked():
            self._check_or_rebuild()

    # -- reading and writing ----------------------------------------------------------

    def get(self, key: CacheKey) -> CachedRun | None:
        """The cached run, verified; None on a miss or a row that is not trustworthy."""
        try:
            with contextlib.closing(self._connect()) as conn:
                row = conn.execute(
                    "SELECT key_json, result_json, submission, checksum FROM results WHERE key = ?", (key.digest,)
                ).fetchone()
        except sqlite3.DatabaseError as exc:
            self._damaged(exc)
            return None
        if row is None:
            return None
        key_json, result_json, submission, checksum = row
        problem = _row_problem(key, key_json, result_json, submission, checksum)
        if problem is None:
            try:
                result = ExecutionResult.from_dict(json.loads(result_json))
            except (ValueError, TypeError) as exc:
                problem = f"its result does not parse ({exc})"
        if problem is not None:
            log.warning("result cache %s: dropped the entry %s…: %s", self.path, key.digest[:12], problem)
            self._delete(key.digest)
            return None
        self._touch(key.digest)
        return CachedRun(result, None if submission is None else bytes(submission))

    def put(self, key: CacheKey, result: ExecutionResult, submission: bytes | None) -> None:
        key_json = key.to_json()
        result_json = json.dumps(result.to_dict(), sort_keys=True)
        size = len(key_json.encode()) + len(result_json.encode()) + len(submission or b"")
        if self.max_bytes is not None and size > self.max_bytes:
            log.info("result cache %s: a %d-byte entry exceeds the whole bound; not stored", self.path, size)
            return
        now = time.time()
        row = (key.digest, key_json, result_json, submission, _checksum(key_json, result_json, submission),
               now, size, now)
        for attempt in (1, 2):
            try:
                with contextlib.closing(self._connect()) as conn, conn:
                    conn.execute("INSERT OR REPLACE INTO results VALUES (?, ?, ?, ?, ?, ?, ?, ?)", row)
                    if self.max_bytes is not None:
                        self.evicted += _evict(conn, self.max_bytes)
                return
            except sqlite3.DatabaseError as exc:
                if isinstance(exc, sqlite3.OperationalError) and "locked" in str(exc):
                    raise SandboxError(f"result cache {self.path} stayed locked for {BUSY_TIMEOUT_S:.0f} s") from exc
                self._damaged(exc)
                if attempt == 2:
                    raise SandboxError(f"result cache {self.path} cannot be written: {exc}") from exc

    def __len__(self) -> int:
        try:
            with contextlib.closing(self._connect()) as conn:
                return int(conn.execute("SELECT COUNT(*) FROM results").fetchone()[0])
        except sqlite3.DatabaseError as exc:
            self._damaged(exc)
            return 0

    @property
    def total_bytes(self) -> int:
        """The entries' total size, as the bound counts it."""
        with contextlib.closing(self._connect()) as conn:
            return int(conn.execute("SELECT COALESCE(SUM(size), 0) FROM results").fetchone()[0])

    def _touch(self, digest: str) -> None:
        """A hit is a use: it moves the entry to the back of the eviction order."""
        if self.max_bytes is None:
            return  # nothing is evicted: spare every hit a write
        # A failed touch leaves the hit a hit.
        with contextlib.suppress(sqlite3.DatabaseError), contextlib.closing(self._connect()) as conn, conn:
            conn.execute("UPDATE results SET last_used = ? WHERE key = ?", (time.time(), digest))

    def clear(self) -> None:
        with contextlib.closing(self._connect()) as conn, conn:
            conn.execute("DELETE FROM results")

    def _delete(self, digest: str) -> None:
        try:
            with contextlib.closing(self._connect()) as conn, conn:
                conn.execute("DELETE FROM results WHERE key = ?", (digest,))
        except sqlite3.DatabaseError as exc:
            self._damaged(exc)

    # -- the file ------------------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S)
        conn.execute("PRAGMA synchronous=NORMAL")  # with WAL: durable at checkpoints, never corrupt
        return conn

    @contextlib.contextmanager
    def _locked(self):
        """Across processes: one checks or rebuilds the file at a time."""
        fd = os.open(f"{self.path}.lock", os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _check_or_rebuild(self) -> None:
        problem = self._problem()
        if problem is None:
            return
        if self.path.exists():
            self._move_aside(problem)
        with contextlib.closing(self._connect()) as conn:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.executescript(_SCHEMA)
            with conn:
                conn.execute("INSERT OR REPLACE INTO meta VALUES ('format', ?)", (str(CACHE_FORMAT),))

    def _problem(self) -> str | None:
        """None if the file is a sound cache of our format; else why not (or 'missing')."""
        if not self.path.exists():
            return "missing"
        try:
            with contextlib.closing(self._connect()) as conn:
                check = conn.execute("PRAGMA quick_check").fetchone()[0]
                if check != "ok":
                    return f"damaged ({check})"
                tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
                if not {"meta", "results"} <= tables:
                    return "not a result cache (tables missing)"
                row = conn.execute("SELECT value FROM meta WHERE name = 'format'").fetchone()
                if row is None or row[0] != str(CACHE_FORMAT):
                    return f"of another format ({row[0] if row else 'none'}; this is {CACHE_FORMAT})"
        except sqlite3.DatabaseError as exc:
            return f"damaged ({exc})"
        return None

    def _move_aside(self, problem: str) -> None:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        aside = self.path.with_name(f"{self.path.name}.bad-{stamp}-{os.getpid()}")
        log.warning("result cache %s is %s: moved to %s, starting an empty one", self.path, problem, aside)
        os.replace(self.path, aside)
        for suffix in ("-wal", "-shm"):  # a stale log would be replayed into the new file
            with contextlib.suppress(FileNotFoundError):
                os.replace(f"{self.path}{suffix}", f"{aside}{suffix}")
        self.rebuilds += 1

    def _damaged(self, exc: Exception) -> None:
        if isinstance(exc, sqlite3.OperationalError) and "locked" in str(exc):
            return  # busy for BUSY_TIMEOUT_S: not damage
        log.warning("result cache %s failed (%s); checking it", self.path, exc)
        with self._locked():
            self._check_or_rebuild()


def _evict(conn: sqlite3.Connection, max_bytes: int) -> int:
    """Inside the writer's transaction: drop the least recently used entries until the
    total is within `max_bytes`; returns how many went."""
    total = int(conn.execute("SELECT COALESCE(SUM(size), 0) FROM results").fetchone()[0])
    if total <= max_bytes:
        return 0
    doomed = []
    for digest, size in conn.execute("SELECT key, size FROM results ORDER BY last_used, created_at").fetchall():
        if total <= max_bytes:
            break
        doomed.append((digest,))
        total -= size
    conn.executemany("DELETE FROM results WHERE key = ?", doomed)
    return len(doomed)


def _checksum(key_json: str, result_json: str, submission: bytes | None) -> str:
    part = "none" if submission is None else hashlib.sha256(submission).hexdigest()
    return hashlib.sha256(f"{key_json}\0{result_json}\0{part}".encode()).hexdigest()


def _row_problem(key: CacheKey, key_json, result_json, submission, checksum) -> str | None:
    if not isinstance(key_json, str) or not isinstance(result_json, str) or not isinstance(checksum, str):
        return "a column has the wrong type"
    if submission is not None and not isinstance(submission, bytes):
        return "its submission is not bytes"
    if key_json != key.to_json():
        return "its key does not match the run asked for"
    if _checksum(key_json, result_json, submission) != checksum:
        return "its checksum does not match its content"
    return None
