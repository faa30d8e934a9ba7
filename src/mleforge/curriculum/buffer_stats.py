"""A buffer state's statistics in SQL: aggregated from its events (all of them, or those
up to a step), cached on its row, read back as `StateStats`, and ranked by its Learnability
Potential, the priority eviction goes by. Every function runs inside the caller's
transaction (`cur`)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from typing import Any

from mleforge.curriculum.config import LearnabilityConfig
from mleforge.curriculum.learnability import state_potential
from mleforge.curriculum.records import StateStats, TaskReference

STATS_COLUMNS = (
    "state_id, task_id, stage, direction, is_seed, rollouts, successes, reward_sum, reward_sumsq, "
    "last_rewards, journal_best, best_score, last_sampled_step, stats_step, added_step"
)


def better(a: float | None, b: float | None, direction: str) -> float | None:
    if a is None:
        return b
    if b is None:
        return a
    return min(a, b) if direction == "lower" else max(a, b)


def reaggregate(cur: sqlite3.Connection, state_ids: Sequence[str], last_k: int) -> None:
    """Set the cached aggregates of `state_ids` from all their events."""
    for sid in state_ids:
        row = cur.execute("SELECT direction, journal_best FROM states WHERE state_id = ?", (sid,)).fetchone()
        agg = aggregate(cur, sid, row[0], row[1], None, last_k)
        cur.execute(
            "UPDATE states SET rollouts = ?, successes = ?, reward_sum = ?, reward_sumsq = ?, last_rewards = ?, "
            "best_score = ?, last_sampled_step = ?, stats_step = ? WHERE state_id = ?",
            (agg["rollouts"], agg["successes"], agg["reward_sum"], agg["reward_sumsq"],
             json.dumps(agg["last_rewards"]), agg["best_score"], agg["last_step"], agg["last_step"], sid),
        )

def aggregate(
    cur: sqlite3.Connection, sid: str, direction: str, journal_best: float | None, as_of: int | None, last_k: int
) -> dict[str, Any]:
    """A state's statistics from its events with step <= as_of (all when None)."""
    bound = (sid,) if as_of is None else (sid, as_of)
    where = "state_id = ?" + ("" if as_of is None else " AND step <= ?")
    n, s, total, sq, last = cur.execute(
        f"SELECT COUNT(*), COALESCE(SUM(success), 0), COALESCE(SUM(reward), 0.0), "
        f"COALESCE(SUM(reward * reward), 0.0), MAX(step) FROM events WHERE {where}",
        bound,
    ).fetchone()
    best_fn = "MIN" if direction == "lower" else "MAX"
    (best,) = cur.execute(
        f"SELECT {best_fn}(score) FROM events WHERE {where} AND outcome = 'valid' AND score IS NOT NULL", bound
    ).fetchone()
    recent = cur.execute(
        f"SELECT reward FROM events WHERE {where} ORDER BY step DESC, id DESC LIMIT ?",
        (*bound, last_k),
    ).fetchall()
    return {
        "rollouts": n, "successes": s, "reward_sum": total, "reward_sumsq": sq,
        "last_rewards": [r[0] for r in reversed(recent)],
        "best_score": better(journal_best, best, direction), "last_step": last,
    }


def refresh_priorities(
    cur: sqlite3.Connection, state_ids: Sequence[str] | None, learnability: LearnabilityConfig
) -> None:
    """Recompute the cached LP of `state_ids` (every live state when None) with the
    current N, peer pools and task references: eviction ranks by the sampler's LP."""
    # N counts evicted states' rollouts too: the events table keeps every rollout.
    (n_total,) = cur.execute("SELECT COUNT(*) FROM events").fetchone()
    pools = {
        (task_id, stage): (k, n) for task_id, stage, k, n in cur.execute(
            "SELECT task_id, stage, SUM(successes), SUM(rollouts) FROM states WHERE evicted_step IS NULL "
            "GROUP BY task_id, stage"
        ).fetchall()
    }
    refs = task_references(cur)
    if state_ids is None:
        rows = cur.execute(f"SELECT {STATS_COLUMNS} FROM states WHERE evicted_step IS NULL").fetchall()
    else:
        rows = []
        for sid in state_ids:
            rows += cur.execute(f"SELECT {STATS_COLUMNS} FROM states WHERE state_id = ?", (sid,)).fetchall()
    updates = []
    for row in rows:
        stats = stats_from_row(row)
        peers = pools.get((stats.task_id, stats.stage), (0, 0))  # (0, 0): an evicted state with no live peers
        lp = state_potential(stats, n_total, refs.get(stats.task_id), learnability, peers=peers).LP
        updates.append((lp, stats.state_id))
    cur.executemany("UPDATE states SET priority = ? WHERE state_id = ?", updates)


def task_references(cur: sqlite3.Connection) -> dict[str, TaskReference]:
    rows = cur.execute("SELECT task_id, direction, top, baseline FROM tasks ORDER BY task_id").fetchall()
    return {r[0]: TaskReference(*r) for r in rows}


def stats_from_row(row: Sequence[Any]) -> StateStats:
    (sid, task_id, stage, direction, is_seed, rollouts, successes, reward_sum, reward_sumsq,
     last_rewards, _journal_best, best_score, last_sampled, _stats_step, added_step) = row
    return StateStats(
        state_id=sid, task_id=task_id, stage=stage, direction=direction, is_seed=bool(is_seed),
        rollouts=rollouts, successes=successes, reward_sum=reward_sum, reward_sumsq=reward_sumsq,
        last_rewards=tuple(json.loads(last_rewards)), best_score=best_score,
        last_sampled_step=last_sampled, added_step=added_step,
    )
