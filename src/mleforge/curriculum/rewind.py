"""Returning a buffer to the end of an earlier sealed step, as if no later step had run: a
resumed trainer whose checkpoint is of that step continues from exactly the buffer the
checkpoint saw (no rollout counted twice, none lost). `StateBuffer.rewind` runs
`rewind_buffer` in one write transaction."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import asdict, dataclass
from typing import Any

from mleforge.curriculum.buffer_stats import reaggregate, refresh_priorities
from mleforge.curriculum.config import BufferConfig, LearnabilityConfig
from mleforge.curriculum.errors import StateBufferError
from mleforge.curriculum.records import SETUP_STEP
from mleforge.curriculum.schema import get_meta, put_meta


@dataclass(frozen=True)
class RewindSummary:
    """What one `rewind` undid: the rollouts (events) of the later steps, the states they
    added, and the states they had evicted (live again)."""

    step: int  # sealed through this step now
    from_step: int  # sealed through this step before
    events_removed: int = 0
    states_removed: int = 0
    states_revived: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def rewind_buffer(
    cur: sqlite3.Connection, step: int, config: BufferConfig, learnability: LearnabilityConfig
) -> RewindSummary:
    """Later events and duplicate offers removed, states added later deleted, rows purged
    later back, states evicted later live again, the cached statistics re-aggregated and the
    priorities recomputed as the seal of `step` left them, the later `steps` rows dropped.
    Refused when `step` is not sealed, or further back than `retain_evicted_steps`."""
    sealed = get_meta(cur, "sealed_step")
    _check_sealed(step, sealed)
    if step == sealed:
        return RewindSummary(step, sealed)
    _check_reachable(cur, step, sealed, config.retain_evicted_steps)
    first_seq, removed = _remove_later_states(cur, step)
    _restore_purged_rows(cur, step)
    touched, events = _remove_later_events(cur, step)
    _undo_duplicate_offers(cur, step)
    revived = cur.execute("UPDATE states SET evicted_step = NULL WHERE evicted_step > ?", (step,)).rowcount
    cur.execute("DELETE FROM steps WHERE step > ?", (step,))
    _restore_statistics(cur, step, touched, config.last_k, learnability)
    _restore_counters(cur, first_seq)
    put_meta(cur, "purged_through", step - config.retain_evicted_steps)
    put_meta(cur, "sealed_step", step)
    return RewindSummary(step, sealed, events, removed, revived)


def _check_sealed(step: int, sealed: int | None) -> None:
    if sealed is None or step > sealed or step < SETUP_STEP:
        raise StateBufferError(
            f"cannot rewind to step {step}: the buffer is sealed through {sealed}; rewind to a "
            f"sealed step (>= {SETUP_STEP})"
        )


def _check_reachable(cur: sqlite3.Connection, step: int, sealed: int, retain_evicted_steps: int) -> None:
    """What was purged before `retain_evicted_steps`, or never logged, is gone for good."""
    purged = get_meta(cur, "purged_through")
    if purged is not None and purged > step:
        raise StateBufferError(
            f"cannot rewind to step {step}: the buffer is sealed through {sealed} and rewinds at most "
            f"retain_evicted_steps ({retain_evicted_steps}) steps back (raise it for "
            "longer gaps between checkpoints)"
        )
    logged_from = get_meta(cur, "offers_logged_from", SETUP_STEP)
    if step + 1 < logged_from:
        raise StateBufferError(
            f"cannot rewind to step {step}: duplicate offers are logged from step {logged_from} on "
            "(the buffer was created by an older mleforge)"
        )


def _remove_later_states(cur: sqlite3.Connection, step: int) -> tuple[int | None, int]:
    """(the first seq of a state added after `step`, how many such states were deleted)."""
    (first_seq,) = cur.execute("SELECT MIN(seq) FROM states WHERE added_step > ?", (step,)).fetchone()
    removed = cur.execute("DELETE FROM states WHERE added_step > ?", (step,)).rowcount
    return first_seq, removed


def _restore_purged_rows(cur: sqlite3.Connection, step: int) -> None:
    """Rows purged since (evicted at or before `step`) come back from the side table."""
    names = [r[1] for r in cur.execute("PRAGMA table_info(states)")]
    for (text,) in cur.execute(
        "SELECT row_json FROM purged_states WHERE purged_step > ? ORDER BY id", (step,)
    ).fetchall():
        row = json.loads(text)
        if row["added_step"] <= step:  # not a re-offered copy added after `step`
            cur.execute(f"INSERT INTO states ({', '.join(names)}) VALUES ({', '.join('?' * len(names))})",
                        [row[n] for n in names])
    cur.execute("DELETE FROM purged_states WHERE purged_step > ?", (step,))


def _remove_later_events(cur: sqlite3.Connection, step: int) -> tuple[list[str], int]:
    """(the states whose events after `step` were removed, how many events)."""
    touched = [r[0] for r in cur.execute(
        "SELECT DISTINCT state_id FROM events WHERE step > ? ORDER BY state_id", (step,))]
    events = cur.execute("DELETE FROM events WHERE step > ?", (step,)).rowcount
    return touched, events


def _undo_duplicate_offers(cur: sqlite3.Connection, step: int) -> None:
    """A later duplicate offer took back: its count, and the seed flag it may have set."""
    for sid, count, was_seed in cur.execute(
        "SELECT state_id, COUNT(*), (SELECT d2.was_seed FROM duplicate_offers d2 WHERE d2.state_id = "
        "d.state_id AND d2.step > ? ORDER BY d2.id LIMIT 1) FROM duplicate_offers d WHERE step > ? "
        "GROUP BY state_id", (step, step),
    ).fetchall():
        cur.execute("UPDATE states SET offers = offers - ?, is_seed = ? WHERE state_id = ?",
                    (count, was_seed, sid))
    cur.execute("DELETE FROM duplicate_offers WHERE step > ?", (step,))


def _restore_statistics(cur: sqlite3.Connection, step: int, touched: list[str], last_k: int,
                        learnability: LearnabilityConfig) -> None:
    alive = {r[0] for r in cur.execute("SELECT state_id FROM states")}
    reaggregate(cur, [sid for sid in touched if sid in alive], last_k)
    # The seal of `step` recomputed priorities before it evicted: do the same with
    # the states it evicted counted as live for the moment.
    evicted_here = [r[0] for r in cur.execute("SELECT state_id FROM states WHERE evicted_step = ?", (step,))]
    cur.execute("UPDATE states SET evicted_step = NULL WHERE evicted_step = ?", (step,))
    refresh_priorities(cur, None, learnability)
    cur.executemany("UPDATE states SET evicted_step = ? WHERE state_id = ?", [(step, s) for s in evicted_here])


def _restore_counters(cur: sqlite3.Connection, first_seq: int | None) -> None:
    if first_seq is not None:
        put_meta(cur, "next_seq", first_seq)
    # Ids continue from where `step` left them (an empty table has no counter yet).
    for table in ("events", "duplicate_offers", "purged_states"):
        (last,) = cur.execute(f"SELECT MAX(id) FROM {table}").fetchone()
        if last is None:
            cur.execute("DELETE FROM sqlite_sequence WHERE name = ?", (table,))
        else:
            cur.execute("UPDATE sqlite_sequence SET seq = ? WHERE name = ?", (last, table))
