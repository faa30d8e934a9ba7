"""The state buffer's SQLite file: its tables, its version, and how a connection is opened.

Tables (SCHEMA_VERSION 2):

    meta(key, value)       schema_version, created_at, the configs it was created
                           with, sealed_step, purged_through, next_seq,
                           offers_logged_from (JSON values)
    tasks                  one TaskReference per task (headroom's top and baseline)
    states                 one row per state: the full State JSON, provenance,
                           visibility (added_step, evicted_step), cached statistics
                           and priority (the LP as of the last sealed step)
    events                 append-only, one row per executed rollout: the source of
                           truth the cached statistics are aggregated from
    steps                  one row per sealed step: growth over steps; a step is in
                           it exactly when its feedback committed
    duplicate_offers       append-only, one row per offer of a state already held
    purged_states          rows purged from `states`, kept retain_evicted_steps more steps
                           These two (v2) are what `StateBuffer.rewind` needs to undo
                           steps exactly; a v1 file gets them when it is opened, and
                           `offers_logged_from` says from which step on the log is complete.

Only the standard library's sqlite3. WAL lets readers (every trainer rank)
read a consistent snapshot while one writer commits; writers serialize on
`BEGIN IMMEDIATE` (the write lock is taken up front, so a transaction never
fails half-way on a lock upgrade) and wait up to busy_timeout for each other.
"""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path
from typing import Any

from mleforge.curriculum.config import BufferConfig
from mleforge.curriculum.errors import SchemaVersionError, StateBufferError
from mleforge.curriculum.records import SETUP_STEP

SCHEMA_VERSION = 2
BUFFER_FILE = "buffer.sqlite"

DDL = """
CREATE TABLE meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE tasks (
    task_id   TEXT PRIMARY KEY,
    direction TEXT NOT NULL,
    top       REAL,
    baseline  REAL
);
CREATE TABLE states (
    state_id          TEXT PRIMARY KEY,   -- State.state_id, the content hash
    task_id           TEXT NOT NULL,
    stage             TEXT NOT NULL,
    direction         TEXT NOT NULL,
    is_seed           INTEGER NOT NULL,
    state_json        TEXT NOT NULL,      -- State.to_dict()
    parent_state_id   TEXT,               -- provenance: the state the rollout came from
    rollout_id        TEXT,
    policy_step       INTEGER,            -- the training step of that rollout (NULL for seeds)
    created_at        REAL NOT NULL,
    seq               INTEGER NOT NULL,   -- insertion order: "age" without trusting clocks
    added_step        INTEGER NOT NULL,   -- visible in snapshots as of this step and later
    evicted_step      INTEGER,            -- invisible in snapshots as of this step and later
    offers            INTEGER NOT NULL,   -- how many times it was offered (dedup hits + 1)
    journal_best      REAL,               -- the best score in the state's own journal
    rollouts          INTEGER NOT NULL,   -- cached aggregates of `events` (see StateBuffer)
    successes         INTEGER NOT NULL,
    reward_sum        REAL NOT NULL,
    reward_sumsq      REAL NOT NULL,
    last_rewards      TEXT NOT NULL,      -- JSON list, oldest first, at most last_k
    best_score        REAL,
    last_sampled_step INTEGER,
    stats_step        INTEGER,            -- the last step whose events changed the aggregates
    priority          REAL NOT NULL       -- the LP as of the last write
);
CREATE INDEX states_task ON states (task_id, evicted_step);
CREATE INDEX states_visible ON states (added_step, evicted_step);
CREATE TABLE events (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    step       INTEGER NOT NULL,
    state_id   TEXT NOT NULL,
    task_id    TEXT NOT NULL,
    rollout_id TEXT,
    reward     REAL NOT NULL,
    success    INTEGER NOT NULL,
    outcome    TEXT NOT NULL,
    score      REAL,
    created_at REAL NOT NULL
);
CREATE INDEX events_state ON events (state_id, step);
CREATE INDEX events_step ON events (step);
CREATE TABLE duplicate_offers (
    id       INTEGER PRIMARY KEY AUTOINCREMENT,
    step     INTEGER NOT NULL,
    state_id TEXT NOT NULL,
    was_seed INTEGER NOT NULL          -- the state's is_seed before this offer
);
CREATE INDEX duplicate_offers_step ON duplicate_offers (step);
CREATE TABLE purged_states (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    purged_step INTEGER NOT NULL,      -- the seal that deleted the row from `states`
    state_id    TEXT NOT NULL,
    row_json    TEXT NOT NULL          -- the whole `states` row, by column name
);
CREATE INDEX purged_states_step ON purged_states (purged_step);
CREATE TABLE steps (
    step        INTEGER PRIMARY KEY,
    sealed_at   REAL NOT NULL,
    live_states INTEGER NOT NULL,
    seeds       INTEGER NOT NULL,
    new_states  INTEGER NOT NULL,
    evicted     INTEGER NOT NULL,
    purged      INTEGER NOT NULL,
    rollouts    INTEGER NOT NULL
);
"""


FILE_SUFFIXES = (".sqlite", ".sqlite3", ".db")


def buffer_path(path: str | Path) -> Path:
    """The buffer file of `path`: itself when it is a file or ends in .sqlite (.sqlite3,
    .db), else `path/buffer.sqlite` (a run directory, existing or to be made)."""
    path = Path(path)
    if path.is_file() or (not path.is_dir() and path.suffix in FILE_SUFFIXES):
        return path
    return path / BUFFER_FILE


def connect(path: Path, config: BufferConfig, *, create: bool) -> sqlite3.Connection:
    """Open the buffer file with WAL, the configured synchronous mode and busy timeout,
    creating the schema when `create` and the file is new."""
    if not create and not path.is_file():
        raise StateBufferError(
            f"no state buffer at {path}; pass a run directory holding {BUFFER_FILE} or the .sqlite file"
        )
    if create:
        path.parent.mkdir(parents=True, exist_ok=True)
    try:
        # isolation_level=None: we issue BEGIN/COMMIT ourselves, so a write
        # transaction is exactly the span we choose and nothing commits implicitly.
        conn = sqlite3.connect(path, timeout=config.busy_timeout_s, isolation_level=None)
    except sqlite3.Error as exc:
        raise StateBufferError(f"cannot open the state buffer {path}: {exc}") from exc
    try:
        conn.execute(f"PRAGMA busy_timeout = {int(config.busy_timeout_s * 1000)}")
        mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise StateBufferError(
                f"{path}: SQLite refused WAL mode (got {mode!r}); put the run directory on a local "
                "file system (WAL does not work over network file systems)"
            )
        conn.execute(f"PRAGMA synchronous = {config.synchronous}")
        _ensure_schema(conn, path, config, create)
    except sqlite3.DatabaseError as exc:
        conn.close()
        raise StateBufferError(f"{path} is not a readable state buffer: {exc}") from exc
    except BaseException:
        conn.close()
        raise
    return conn


def _ensure_schema(conn: sqlite3.Connection, path: Path, config: BufferConfig, create: bool) -> None:
    # IMMEDIATE: two processes creating the same new buffer serialize here, and
    # the second one sees the first one's tables.
    conn.execute("BEGIN IMMEDIATE")
    try:
        exists = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta'").fetchone()
        if not exists:
            if not create:
                raise StateBufferError(f"{path} is an SQLite file but not a state buffer (no meta table)")
            for statement in DDL.split(";"):
                if statement.strip():
                    conn.execute(statement)
            put_meta(conn, "schema_version", SCHEMA_VERSION)
            put_meta(conn, "created_at", time.time())
            put_meta(conn, "next_seq", 0)
            put_meta(conn, "buffer_config", config.to_dict())
            put_meta(conn, "offers_logged_from", SETUP_STEP)
        elif get_meta(conn, "schema_version") == 1:
            _migrate_v1(conn)
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    version = get_meta(conn, "schema_version")
    if version != SCHEMA_VERSION:
        raise SchemaVersionError(
            f"{path} has state-buffer schema version {version}; this mleforge reads version "
            f"{SCHEMA_VERSION}. Read it with the mleforge that wrote it (`mleforge buffer export`), "
            "or start a new run directory"
        )


def _migrate_v1(conn: sqlite3.Connection) -> None:
    """Version 1 lacks the duplicate-offer log: add it. Duplicates offered before now were
    not logged, so a rewind to a step before the next unsealed one is refused."""
    conn.execute(
        "CREATE TABLE duplicate_offers (id INTEGER PRIMARY KEY AUTOINCREMENT, step INTEGER NOT NULL, "
        "state_id TEXT NOT NULL, was_seed INTEGER NOT NULL)"
    )
    conn.execute("CREATE INDEX duplicate_offers_step ON duplicate_offers (step)")
    conn.execute(
        "CREATE TABLE purged_states (id INTEGER PRIMARY KEY AUTOINCREMENT, purged_step INTEGER NOT NULL, "
        "state_id TEXT NOT NULL, row_json TEXT NOT NULL)"
    )
    conn.execute("CREATE INDEX purged_states_step ON purged_states (purged_step)")
    sealed = get_meta(conn, "sealed_step")
    put_meta(conn, "offers_logged_from", SETUP_STEP if sealed is None else sealed + 1)
    put_meta(conn, "schema_version", SCHEMA_VERSION)


def get_meta(conn: sqlite3.Connection, key: str, default: Any = None) -> Any:
    row = conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
    return default if row is None else json.loads(row[0])


def put_meta(conn: sqlite3.Connection, key: str, value: Any) -> None:
    conn.execute(
        "INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        (key, json.dumps(value)),
    )
