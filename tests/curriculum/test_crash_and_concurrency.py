"""Real processes: SIGKILL in the middle of a trace-feedback stream, and concurrent writers.

The crash test kills a process streaming one GRPO step of feedback after
another, many times at random moments (during start-up, seeding and commits
too), and after each kill checks that the buffer opens, holds every step the
process reported committed, and holds no half-written step or state. The
stream is a deterministic function of the sealed buffer and the step number,
so the buffer left by all those crashes and restarts must equal, row for row,
the buffer of one uninterrupted run.
"""

from __future__ import annotations

import json
import random
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from mleforge.curriculum.buffer import StateBuffer
from mleforge.curriculum.records import SETUP_STEP
from tests.curriculum import workers
from tests.curriculum.helpers import idea_state

WORKERS = Path(__file__).with_name("workers.py")
KILLS = 24
MAX_STEPS = 600  # far beyond what the kills let through: 3 start-ups of < 0.5 s, then 21 x at most ~14 steps


def start(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(WORKERS), *args], stdout=subprocess.PIPE, text=True)


def check_intact(path: Path, committed: int) -> int:
    """The buffer opens, is consistent, and holds every step reported committed; its sealed step."""
    if not (path / "buffer.sqlite").exists():  # killed before creating it
        assert committed < 0
        return -2
    with sqlite3.connect(path / "buffer.sqlite") as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        # Killed after SQLite made the file (the WAL pragma writes it) and before the schema
        # committed: an empty database, which the next open completes.
        created = conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'meta'").fetchone() is not None
        if created:
            events_by_step = dict(conn.execute("SELECT step, COUNT(*) FROM events GROUP BY step").fetchall())
            per_state = dict(conn.execute("SELECT state_id, COUNT(*) FROM events GROUP BY state_id").fetchall())
    conn.close()
    if not created:
        assert committed < 0
        return -2
    buffer = StateBuffer(path, create=False)
    sealed = buffer.sealed_step
    if sealed is None:  # killed before set-up finished: nothing was reported committed either
        assert committed < 0
        buffer.close()
        return -2
    assert sealed >= committed, f"step {committed} was reported committed, the buffer has {sealed}"
    growth = buffer.growth()
    assert [g["step"] for g in growth] == list(range(SETUP_STEP, sealed + 1))  # no gap, no partial step
    assert events_by_step == {s: 4 for s in range(sealed + 1)}  # every sealed step whole, nothing after
    assert all(g["rollouts"] == events_by_step.get(g["step"], 0) for g in growth)
    rows = buffer.rows(include_evicted=True)
    for row in rows:  # the cached statistics are exactly the events
        assert row["rollouts"] == per_state.get(row["state_id"], 0)
    states = buffer.get_states([r["state_id"] for r in rows])  # every state parses and hashes to its id
    assert len(states) == len(rows)
    buffer.close()
    return sealed


def dump(path: Path) -> tuple[list, list]:
    with sqlite3.connect(path / "buffer.sqlite") as conn:
        events = conn.execute(
            "SELECT step, state_id, rollout_id, reward, success, outcome, score FROM events ORDER BY id"
        ).fetchall()
        states = conn.execute(
            "SELECT state_id, state_json, is_seed, parent_state_id, rollout_id, policy_step, seq, added_step, "
            "evicted_step, offers, rollouts, successes, reward_sum, last_rewards, best_score, priority "
            "FROM states ORDER BY state_id"
        ).fetchall()
    conn.close()
    return events, states


def test_sigkill_during_trace_feedback_loses_no_commit(tmp_path):
    path = tmp_path / "run"
    rng = random.Random(20240607)
    committed, kills, sealed = -2, 0, -2
    while kills < KILLS:
        proc = start("stream", str(path), str(MAX_STEPS))
        seen = ""
        if kills >= 3:  # the first few die during start-up, creation and seeding
            assert proc.stdout.readline().strip() == "ready"
            # Let a seeded number of steps commit, then kill within the next few: the
            # progress per kill is counted in steps, so the stream cannot reach its end
            # on a fast machine, and still moves on a slow one.
            for _ in range(rng.randint(0, 12)):
                seen += proc.stdout.readline()
            time.sleep(rng.uniform(0.0, 0.01))
        else:
            time.sleep(rng.uniform(0.0, 0.5))
        proc.kill()
        out = seen + proc.communicate()[0]
        assert "done" not in out, "the stream finished before the kills did; raise MAX_STEPS"
        for line in out.splitlines():
            if line.startswith("committed "):
                committed = max(committed, int(line.split()[1]))
        kills += 1
        sealed = check_intact(path, committed)
    assert sealed >= 10, "the kills should land while steps are being committed"
    finish = start("stream", str(path), str(MAX_STEPS))
    assert finish.communicate()[0].strip().endswith("done") and finish.returncode == 0
    assert check_intact(path, MAX_STEPS - 1) == MAX_STEPS - 1

    reference = workers.open_stream(str(tmp_path / "reference"))
    for step in range(MAX_STEPS):
        workers.stream_step(reference, step)
    reference.close()
    crashed_events, crashed_states = dump(path)
    ref_events, ref_states = dump(tmp_path / "reference")
    assert crashed_events == ref_events
    assert crashed_states == ref_states


def test_concurrent_writers_and_a_reader_lose_nothing(tmp_path):
    buffer = StateBuffer(tmp_path)
    seeds = sorted((idea_state("alpha", 1000 + i) for i in range(3)), key=lambda s: s.state_id)
    buffer.offer(seeds, seed=True)
    buffer.seal(SETUP_STEP)
    n, writers = 60, 4
    start_at = time.time() + 1.0  # after every worker has imported and opened the buffer
    procs = [start("hammer", str(tmp_path), str(w), str(n), str(start_at)) for w in range(writers)]
    stop = tmp_path / "writers-done"
    reader = start("snap", str(tmp_path), str(stop))
    for proc in procs:
        assert proc.communicate(timeout=60)[0].strip() == "done" and proc.returncode == 0
    stop.touch()
    out = reader.communicate(timeout=60)[0]
    assert reader.returncode == 0 and json.loads(out)["reads"] > 0  # snapshot of step -1 never moved

    # each iteration gives each seed one rollout, with k = 0, 1, 2 in turn (rewards 0.25, 0.5, 0.75;
    # success only for k = 2); n is a multiple of 3, so each seed got each k n/3 times per writer
    rows = {r["state_id"]: r for r in buffer.rows()}
    counts = buffer.counts()
    assert counts["rollouts"] == writers * n * 3
    assert counts["live_states"] == 3 + writers * n
    for seed in seeds:
        row = rows[seed.state_id]
        assert row["rollouts"] == writers * n
        assert row["successes"] == writers * n // 3
        assert row["reward_sum"] == writers * (n // 3) * 1.5
    offered = {r["rollout_id"] for r in rows.values() if not r["is_seed"]}
    assert offered == {f"w{w}-{i}" for w in range(writers) for i in range(n)}
