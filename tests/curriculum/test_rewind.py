"""StateBuffer.rewind: back to the end of an earlier step, exactly, so a resumed trainer
continues from the buffer its checkpoint saw; and the v1 -> v2 schema migration."""

from __future__ import annotations

import sqlite3

import pytest

from mleforge.curriculum.buffer import StateBuffer
from mleforge.curriculum.config import BufferConfig
from mleforge.curriculum.errors import StateBufferError
from mleforge.curriculum.records import SETUP_STEP, Offer, TaskReference
from tests.curriculum.helpers import child_state, idea_state, rec

# Columns that hold wall-clock times: the only things two runs of the same steps may differ in.
CLOCK_COLUMNS = {"created_at", "sealed_at"}
TABLES = ("tasks", "states", "events", "duplicate_offers", "purged_states", "steps")


def dump(buf: StateBuffer) -> dict:
    """Every row of every table (and the meta keys but created_at), without clock columns."""
    conn = sqlite3.connect(buf.path)
    out = {}
    for table in TABLES:
        cursor = conn.execute(f"SELECT * FROM {table} ORDER BY 1, 2")
        names = [d[0] for d in cursor.description]
        out[table] = [{k: v for k, v in zip(names, row) if k not in CLOCK_COLUMNS} for row in cursor]
    out["meta"] = dict(conn.execute("SELECT key, value FROM meta WHERE key != 'created_at'").fetchall())
    out["sequence"] = dict(conn.execute("SELECT name, seq FROM sqlite_sequence").fetchall())
    conn.close()
    return out


SEEDS = [idea_state("alpha", i) for i in range(3)]


def feed(buf: StateBuffer, step: int) -> None:
    """One deterministic training step: rollouts of two seeds, their child states (one
    of them the same every step: a duplicate offer from step 1 on), a seed re-offered."""
    a, b = SEEDS[step % 3], SEEDS[(step + 1) % 3]
    records = [rec(a, 0.0), rec(a, 0.6, score=0.6), rec(b, 0.5 + 0.1 * step, score=0.5 + 0.1 * step)]
    offers = [
        Offer(child_state(a, f"new{step}", valid=False), a.state_id, f"s{step}r0"),
        Offer(child_state(b, "same", valid=True, score=0.7), b.state_id, f"s{step}r2"),
    ]
    buf.apply_feedback(step, records, offers)


@pytest.fixture
def buffer(tmp_path):
    # 4 live states per task: the 3 seeds and one more, so every step evicts.
    buf = StateBuffer(tmp_path, BufferConfig(max_states_per_task=4, retain_evicted_steps=3))
    buf.set_up([TaskReference("alpha", "higher", 1.0, 0.0)], SEEDS)
    yield buf
    buf.close()


def test_rewind_returns_every_row_to_the_step_and_replaying_gives_the_same_buffer(buffer):
    feed(buffer, 0)
    feed(buffer, 1)
    at_1 = dump(buffer)
    feed(buffer, 2)
    feed(buffer, 3)
    at_3 = dump(buffer)
    assert at_3["duplicate_offers"] and any(s["evicted_step"] is not None for s in at_3["states"])
    summary = buffer.rewind(1)
    assert (summary.step, summary.from_step, summary.events_removed) == (1, 3, 6)
    assert summary.states_removed >= 1 and summary.states_revived >= 1
    # the seal of step 3 purged the rows evicted at step 0: they come back too
    assert at_3["purged_states"] and dump(buffer) == at_1
    feed(buffer, 2)
    feed(buffer, 3)
    assert dump(buffer) == at_3


def test_rewind_to_the_set_up_step_keeps_only_the_seeds(buffer):
    seeds_only = dump(buffer)
    feed(buffer, 0)
    buffer.rewind(SETUP_STEP)
    assert dump(buffer) == seeds_only
    assert buffer.counts() == {"live_states": 3, "seeds": 3, "evicted_kept": 0, "rollouts": 0, "sealed_steps": 1}


def test_rewind_refuses_what_it_cannot_undo(buffer):
    with pytest.raises(StateBufferError, match="sealed through -1"):
        buffer.rewind(0)
    for step in range(6):
        feed(buffer, step)
    before = dump(buffer)
    assert buffer.rewind(5).events_removed == 0 and dump(buffer) == before
    # purged through 5 - 3 = 2: the rows evicted at steps 1 and 2 are gone
    with pytest.raises(StateBufferError, match="at most retain_evicted_steps"):
        buffer.rewind(1)
    assert dump(buffer) == before  # a refused rewind changes nothing
    buffer.rewind(2)
    assert buffer.sealed_step == 2


def test_a_version_1_file_gets_the_log_and_rewinds_only_after_it(tmp_path):
    buf = StateBuffer(tmp_path)
    buf.set_up([TaskReference("alpha", "higher", 1.0, 0.0)], SEEDS)
    feed(buf, 0)
    buf.close()
    conn = sqlite3.connect(tmp_path / "buffer.sqlite")
    conn.execute("DROP TABLE duplicate_offers")
    conn.execute("DROP TABLE purged_states")
    conn.execute("UPDATE meta SET value = '1' WHERE key = 'schema_version'")
    conn.execute("DELETE FROM meta WHERE key = 'offers_logged_from'")
    conn.commit()
    conn.close()
    again = StateBuffer(tmp_path)
    assert dump(again)["meta"]["offers_logged_from"] == "1" and dump(again)["meta"]["schema_version"] == "2"
    feed(again, 1)
    with pytest.raises(StateBufferError, match="logged from step 1"):
        again.rewind(SETUP_STEP)
    again.rewind(0)
    assert again.sealed_step == 0
