"""The Evolving Data Buffer (AceGRPO): training states in SQLite, shared by processes.

Writes happen in steps. Every write names the training step it belongs to;
`seal(step)` closes a step (priorities recomputed, bounds enforced, a `steps`
row written), after which nothing may be written to it or to any earlier step.
`apply_feedback` records a step's rollouts, offers its new states and seals it
in one transaction: a crash leaves either all of it or none of it. `rewind(step)`
returns the buffer to the end of an earlier sealed step (a trainer resumed from
that step's checkpoint), undoing the later steps exactly.

Snapshots and determinism. Sampling training step t reads `snapshot(t - 1)`:
the states and statistics exactly as the end of step t - 1 left them. Every
rank gets the same snapshot whenever it reads, before or after step t's
feedback commits, because a snapshot is a function of sealed data only:

  * a state is visible as of v when added_step <= v < evicted_step (eviction is
    a soft delete; rows are deleted only `retain_evicted_steps` later, and
    older snapshots are refused instead of silently differing);
  * statistics come from the append-only `events` table restricted to
    step <= v. The cached aggregates on `states` are exactly that when the row
    has no events after v (`stats_step <= v`, the common case); otherwise
    they are re-aggregated from events, with the same queries (the same
    index order, so even float sums agree to the bit).

Task references (headroom's top and baseline) are not versioned: register
them at set-up, before step 0. `set_up(references, seeds)` registers them,
offers the seeds and seals the set-up step in one transaction.

Statistics are updated once per step from results gathered across ranks
(`apply_feedback` on one process), never per rank. Several processes may also
write concurrently (executor workers offering states, a trainer updating):
writers serialize on `BEGIN IMMEDIATE` and recompute aggregates from events
inside their transaction, so no update is lost.

Use one StateBuffer per process (a forked child reopens its own connection). A process
that must not write (the other ranks of a multi-process trainer, whose main process owns
the buffer) opens it with `writer=False`: SQLite's `query_only` refuses every change on its
connection, and a write method raises StateBufferError saying so.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from mleforge.agent.state import State
from mleforge.curriculum.buffer_stats import (
    STATS_COLUMNS,
    aggregate,
    reaggregate,
    refresh_priorities,
    stats_from_row,
    task_references,
)
from mleforge.curriculum.config import BufferConfig, LearnabilityConfig
from mleforge.curriculum.errors import StateBufferError, StepNotSealed, StepSealed
from mleforge.curriculum.records import (
    SETUP_STEP,
    BufferSnapshot,
    Offer,
    RolloutRecord,
    TaskReference,
)
from mleforge.curriculum.rewind import RewindSummary, rewind_buffer
from mleforge.curriculum.schema import buffer_path, connect, get_meta, put_meta
from mleforge.errors import MleforgeError

POLL_S = 0.05


@dataclass(frozen=True)
class FeedbackSummary:
    """What one `apply_feedback` did. `applied` is False when the step was already
    sealed by an earlier call (a resumed run replaying its last step): nothing changed."""

    step: int
    applied: bool
    rollouts: int = 0
    new_states: int = 0
    duplicate_offers: int = 0
    evicted: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _as_offers(items: Iterable[Offer | State]) -> list[Offer]:
    return [o if isinstance(o, Offer) else Offer(o) for o in items]


class StateBuffer:
    """The evolving buffer of training states (see the module docstring).

    `config` and `learnability` default to what the buffer was created with
    (stored in its file), so every process and `mleforge buffer show` agree.
    """

    def __init__(
        self,
        path: str | Path,
        config: BufferConfig | None = None,
        learnability: LearnabilityConfig | None = None,
        *,
        create: bool = True,
        writer: bool = True,
    ):
        self.path = buffer_path(path)
        self.writer = writer
        self._create = create and writer  # a reader opens a buffer that exists
        self._conn_obj: sqlite3.Connection | None = None
        self._pid = -1
        self.config = config or BufferConfig()
        conn = self._conn
        stored = get_meta(conn, "buffer_config")
        if config is None and stored:
            self.config = BufferConfig.from_dict(stored)
            # The connection was opened with the defaults: apply the stored settings.
            conn.execute(f"PRAGMA synchronous = {self.config.synchronous}")
            conn.execute(f"PRAGMA busy_timeout = {int(self.config.busy_timeout_s * 1000)}")
        stored_lp = get_meta(conn, "learnability_config")
        if learnability is None:
            learnability = LearnabilityConfig.from_dict(stored_lp) if stored_lp else LearnabilityConfig()
        made_with = (stored_lp or {}).get("success", "improve")
        if stored_lp is not None and learnability.success != made_with:
            raise StateBufferError(
                f"{self.path}: this buffer counted its successes as learnability.success {made_with!r} and is "
                f"opened with {learnability.success!r}; each rollout's success is stored as it is counted, so "
                f"the two would mix. Keep learnability.success {made_with!r} for this run, or start a new run"
            )
        self.learnability = learnability
        if stored_lp is None and self.writer:
            with self._write() as cur:
                if get_meta(cur, "learnability_config") is None:
                    put_meta(cur, "learnability_config", learnability.to_dict())

    # --- connection ---

    @property
    def _conn(self) -> sqlite3.Connection:
        # A connection must not cross fork(): a child reopens its own.
        if self._conn_obj is None or self._pid != os.getpid():
            self._conn_obj = connect(self.path, self.config, create=self._create)
            if not self.writer:
                self._conn_obj.execute("PRAGMA query_only = ON")
            self._pid = os.getpid()
        return self._conn_obj

    def close(self) -> None:
        if self._conn_obj is not None and self._pid == os.getpid():
            self._conn_obj.close()
        self._conn_obj = None

    def __enter__(self) -> StateBuffer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        if not self.writer:
            raise StateBufferError(f"{self.path} was opened to read (writer=False): in a multi-process run the "
                                   "main process (rank 0) alone writes the buffer")
        conn = self._conn
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            raise StateBufferError(
                f"{self.path}: could not start a write within {self.config.busy_timeout_s} s ({exc}); "
                "another process holds the write lock"
            ) from exc
        try:
            yield conn
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        # One read transaction: every query inside sees the same committed state (WAL).
        conn = self._conn
        conn.execute("BEGIN")
        try:
            yield conn
        finally:
            conn.execute("COMMIT")

    # --- steps ---

    @property
    def sealed_step(self) -> int | None:
        """The last sealed step, or None before the first seal."""
        return get_meta(self._conn, "sealed_step")

    def _writable_step(self, cur: sqlite3.Connection, step: int) -> None:
        sealed = get_meta(cur, "sealed_step")
        if sealed is not None and step <= sealed:
            raise StepSealed(
                f"step {step} is sealed (the buffer is sealed through step {sealed}); write to step "
                f"{sealed + 1} or later, since ranks may already have read the snapshot of step {step}"
            )

    # --- writes ---

    def set_up(self, references: Iterable[TaskReference], seeds: Iterable[Offer | State]) -> bool:
        """Register the tasks, offer the seeds and seal the set-up step, in one transaction.

        False (and nothing done) when the set-up step is already sealed. A process
        killed during set-up leaves no part of it, so a restart runs it again from
        scratch instead of offering the seeds it had committed a second time.
        """
        with self._write() as cur:
            if get_meta(cur, "sealed_step") is not None:
                return False
            for reference in references:
                self._register(cur, reference)
            self._offer(cur, _as_offers(seeds), SETUP_STEP, True, refresh=False)
            self._seal(cur, SETUP_STEP)
            return True

    def register_task(self, reference: TaskReference) -> None:
        """Store (or replace) a task's top and baseline, which headroom needs."""
        with self._write() as cur:
            self._register(cur, reference)

    @staticmethod
    def _register(cur: sqlite3.Connection, reference: TaskReference) -> None:
        cur.execute(
            "INSERT INTO tasks (task_id, direction, top, baseline) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (task_id) DO UPDATE SET direction = excluded.direction, "
            "top = excluded.top, baseline = excluded.baseline",
            (reference.task_id, reference.direction, reference.top, reference.baseline),
        )

    def offer(self, offers: Iterable[Offer | State], step: int | None = None, *, seed: bool = False) -> list[bool]:
        """Add states; one flag per offer, True when it was new (False: a duplicate).

        Seeds take `step=None`: they join as of the set-up step before the first
        seal, else as of the next unsealed step. Rollout states name their step.
        """
        with self._write() as cur:
            return self._offer(cur, _as_offers(offers), step, seed)

    def record(self, rollouts: Sequence[RolloutRecord], step: int) -> None:
        """Count executed rollouts of buffer states at `step` (which must be unsealed)."""
        with self._write() as cur:
            self._writable_step(cur, step)
            self._record(cur, rollouts, step)

    def seal(self, step: int) -> bool:
        """Close `step`: recompute priorities, evict over the bounds, write its `steps` row.
        False (and nothing done) when `step` is already sealed: sealing is idempotent."""
        with self._write() as cur:
            sealed = get_meta(cur, "sealed_step")
            if sealed is not None and step <= sealed:
                return False
            self._seal(cur, step)
            return True

    def apply_feedback(self, step: int, rollouts: Sequence[RolloutRecord], offers: Sequence[Offer]) -> FeedbackSummary:
        """Record a finished step's rollouts, offer its new states and seal it, in one
        transaction. Replaying a sealed step (a resumed run) changes nothing."""
        with self._write() as cur:
            if cur.execute("SELECT 1 FROM steps WHERE step = ?", (step,)).fetchone():
                return FeedbackSummary(step, applied=False)
            self._writable_step(cur, step)
            # No per-write priority refresh: the seal recomputes every live state's.
            self._record(cur, rollouts, step, refresh=False)
            flags = self._offer(cur, list(offers), step, seed=False, refresh=False)
            evicted = self._seal(cur, step)
        new = sum(flags)
        return FeedbackSummary(step, True, len(rollouts), new, len(flags) - new, evicted)

    def rewind(self, step: int) -> RewindSummary:
        """Return the buffer to the end of sealed step `step`, as if no later step had run:
        a resumed trainer whose checkpoint is of step `step` continues from exactly the
        buffer that checkpoint saw (no rollout counted twice, none lost).

        In one transaction: later events and duplicate offers are removed, states added
        later are deleted, rows purged later come back, states evicted later are live
        again, the cached statistics are re-aggregated and the priorities recomputed as
        the seal of `step` left them, and the later `steps` rows are dropped. Refused
        when `step` is not sealed, or further back than `retain_evicted_steps` (what
        was purged before that is gone for good). Rewinding to the sealed step itself
        changes nothing (`mleforge.curriculum.rewind`).
        """
        with self._write() as cur:
            return rewind_buffer(cur, step, self.config, self.learnability)

    # --- write internals (inside a transaction) ---

    def _offer(
        self, cur: sqlite3.Connection, offers: list[Offer], step: int | None, seed: bool, refresh: bool = True
    ) -> list[bool]:
        sealed = get_meta(cur, "sealed_step")
        if step is None:
            if not seed:
                raise StateBufferError("a rollout's state is offered at the step of that rollout; pass step")
            step = SETUP_STEP if sealed is None else sealed + 1
        self._writable_step(cur, step)
        flags, touched = [], []
        now = time.time()
        for offer in offers:
            state = offer.state
            sid = state.state_id
            held = cur.execute("SELECT is_seed FROM states WHERE state_id = ?", (sid,)).fetchone()
            if held:
                # A duplicate changes only its offer count, and makes a live state a seed
                # when offered as one. An evicted state stays evicted: reviving it would
                # change snapshots of steps it was invisible in. The log lets rewind undo it.
                cur.execute(
                    "INSERT INTO duplicate_offers (step, state_id, was_seed) VALUES (?, ?, ?)", (step, sid, held[0])
                )
                cur.execute(
                    "UPDATE states SET offers = offers + 1, is_seed = CASE WHEN evicted_step IS NULL "
                    "THEN MAX(is_seed, ?) ELSE is_seed END WHERE state_id = ?",
                    (int(seed), sid),
                )
                flags.append(False)
                continue
            seq = get_meta(cur, "next_seq")
            put_meta(cur, "next_seq", seq + 1)
            cur.execute(
                "INSERT INTO states (state_id, task_id, stage, direction, is_seed, state_json, parent_state_id, "
                "rollout_id, policy_step, created_at, seq, added_step, offers, journal_best, rollouts, successes, "
                "reward_sum, reward_sumsq, last_rewards, best_score, priority) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1, ?, 0, 0, 0.0, 0.0, '[]', ?, 0.0)",
                (
                    sid, state.task_id, state.stage, state.journal.direction, int(seed),
                    json.dumps(state.to_dict(), ensure_ascii=False, allow_nan=False),
                    offer.parent_state_id, offer.rollout_id, None if seed else step, now, seq, step,
                    state.journal.best_score, state.journal.best_score,
                ),
            )
            touched.append(sid)
            flags.append(True)
        # A state purged earlier and offered again keeps the history it earned.
        reaggregate(cur, touched, self.config.last_k)
        if refresh:
            refresh_priorities(cur, touched, self.learnability)
        return flags

    def _record(
        self, cur: sqlite3.Connection, rollouts: Sequence[RolloutRecord], step: int, refresh: bool = True
    ) -> None:
        now = time.time()
        known: dict[str, str] = {}
        for r in rollouts:
            if r.state_id not in known:
                row = cur.execute("SELECT task_id FROM states WHERE state_id = ?", (r.state_id,)).fetchone()
                if row is None:
                    raise StateBufferError(
                        f"rollout {r.rollout_id} names state {r.state_id[:12]}..., which is not in the buffer"
                    )
                known[r.state_id] = row[0]
            cur.execute(
                "INSERT INTO events (step, state_id, task_id, rollout_id, reward, success, outcome, score, created_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (step, r.state_id, known[r.state_id], r.rollout_id, float(r.reward), int(r.success), r.outcome,
                 r.score if r.outcome == "valid" else None, now),
            )
        reaggregate(cur, list(known), self.config.last_k)
        if refresh:
            refresh_priorities(cur, list(known), self.learnability)

    def _seal(self, cur: sqlite3.Connection, step: int) -> int:
        refresh_priorities(cur, None, self.learnability)
        evicted = 0
        per_task = self.config.max_states_per_task
        if per_task is not None:
            for task_id, live in cur.execute(
                "SELECT task_id, COUNT(*) FROM states WHERE evicted_step IS NULL GROUP BY task_id"
            ).fetchall():
                if live > per_task:
                    evicted += self._evict(cur, step, live - per_task, task_id)
        total = self.config.max_states
        if total is not None:
            (live,) = cur.execute("SELECT COUNT(*) FROM states WHERE evicted_step IS NULL").fetchone()
            if live > total:
                evicted += self._evict(cur, step, live - total, None)
        # Rows evicted long enough ago that no admissible snapshot can see them.
        horizon = step - self.config.retain_evicted_steps
        # A purged row is kept aside as long as a rewind may reach back before its purge
        # (retain_evicted_steps): a replayed step then finds it as the first run did.
        cursor = cur.execute("SELECT * FROM states WHERE evicted_step IS NOT NULL AND evicted_step <= ?", (horizon,))
        names = [d[0] for d in cursor.description]
        cur.executemany(
            "INSERT INTO purged_states (purged_step, state_id, row_json) VALUES (?, ?, ?)",
            [(step, row[0], json.dumps(dict(zip(names, row)))) for row in cursor.fetchall()],
        )
        purged = cur.execute(
            "DELETE FROM states WHERE evicted_step IS NOT NULL AND evicted_step <= ?", (horizon,)
        ).rowcount
        cur.execute("DELETE FROM purged_states WHERE purged_step <= ?", (horizon,))
        put_meta(cur, "purged_through", max(horizon, get_meta(cur, "purged_through", horizon)))
        live, seeds, new = cur.execute(
            "SELECT COUNT(*), COALESCE(SUM(is_seed), 0), COALESCE(SUM(added_step = ?), 0) FROM states "
            "WHERE evicted_step IS NULL",
            (step,),
        ).fetchone()
        (n_rollouts,) = cur.execute("SELECT COUNT(*) FROM events WHERE step = ?", (step,)).fetchone()
        cur.execute(
            "INSERT INTO steps (step, sealed_at, live_states, seeds, new_states, evicted, purged, rollouts) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (step, time.time(), live, seeds, new, evicted, purged, n_rollouts),
        )
        put_meta(cur, "sealed_step", step)
        return evicted

    def _evict(self, cur: sqlite3.Connection, step: int, count: int, task_id: str | None) -> int:
        """Soft-delete up to `count` non-seed live states: lowest priority first, then oldest."""
        where = "evicted_step IS NULL AND is_seed = 0" + ("" if task_id is None else " AND task_id = ?")
        params: tuple = () if task_id is None else (task_id,)
        victims = cur.execute(
            f"SELECT state_id FROM states WHERE {where} ORDER BY priority ASC, seq ASC LIMIT ?", (*params, count)
        ).fetchall()
        cur.executemany("UPDATE states SET evicted_step = ? WHERE state_id = ?", [(step, v[0]) for v in victims])
        return len(victims)

    # --- reads ---

    def tasks(self) -> dict[str, TaskReference]:
        return task_references(self._conn)

    def snapshot(self, as_of: int, *, wait_s: float = 0.0) -> BufferSnapshot:
        """The live states and their statistics as of the end of step `as_of`, sorted by
        state_id (see the module docstring). Waits up to `wait_s` for the step to be
        sealed, then raises StepNotSealed."""
        deadline = time.monotonic() + wait_s
        while True:
            with self._read() as cur:
                sealed = get_meta(cur, "sealed_step")
                if sealed is not None and as_of <= sealed:
                    return self._snapshot(cur, as_of)
            if time.monotonic() >= deadline:
                raise StepNotSealed(
                    f"step {as_of} is not sealed yet (sealed through {sealed}); the writer seals a step "
                    "when its feedback commits, and set-up seals step -1 after seeding (buffer.seal(-1))"
                )
            time.sleep(POLL_S)

    def _snapshot(self, cur: sqlite3.Connection, as_of: int) -> BufferSnapshot:
        purged = get_meta(cur, "purged_through")
        if purged is not None and as_of < purged:
            raise StateBufferError(
                f"the snapshot of step {as_of} is gone: states evicted through step {purged} were deleted "
                "(raise buffer.retain_evicted_steps to let ranks read further behind)"
            )
        rows = cur.execute(
            f"SELECT {STATS_COLUMNS} FROM states WHERE added_step <= ? "
            "AND (evicted_step IS NULL OR evicted_step > ?) ORDER BY state_id",
            (as_of, as_of),
        ).fetchall()
        states = []
        for row in rows:
            stats = stats_from_row(row)
            stats_step = row[13]
            if stats_step is not None and stats_step > as_of:
                # Events after `as_of` are in the cache: aggregate the earlier ones only.
                agg = aggregate(cur, stats.state_id, stats.direction, row[10], as_of, self.config.last_k)
                stats = stats_from_row((*row[:5], agg["rollouts"], agg["successes"], agg["reward_sum"],
                                         agg["reward_sumsq"], json.dumps(agg["last_rewards"]), row[10],
                                         agg["best_score"], agg["last_step"], agg["last_step"], row[14]))
            states.append(stats)
        (counted,) = cur.execute("SELECT COUNT(*) FROM events WHERE step <= ?", (as_of,)).fetchone()
        return BufferSnapshot(as_of, tuple(states), task_references(cur), rollouts_counted=counted)

    def get_states(self, state_ids: Sequence[str]) -> list[State]:
        """The States of `state_ids`, in that order (evicted ones too, until deleted)."""
        wanted = list(dict.fromkeys(state_ids))
        found: dict[str, State] = {}
        with self._read() as cur:
            for sid in wanted:
                row = cur.execute("SELECT state_json FROM states WHERE state_id = ?", (sid,)).fetchone()
                if row is None:
                    raise StateBufferError(f"state {sid[:12]}... is not in the buffer (never added, or deleted)")
                found[sid] = _load_state(sid, row[0])
        return [found[sid] for sid in state_ids]

    def rows(self, *, include_evicted: bool = False, with_state: bool = False) -> list[dict[str, Any]]:
        """Every (live) state row as a dict, sorted by state_id: for show and export."""
        where = "" if include_evicted else "WHERE evicted_step IS NULL"
        with self._read() as cur:
            cursor = cur.execute(f"SELECT * FROM states {where} ORDER BY state_id")
            names = [d[0] for d in cursor.description]
            out = []
            for values in cursor.fetchall():
                row = dict(zip(names, values))
                row["last_rewards"] = json.loads(row["last_rewards"])
                row["is_seed"] = bool(row["is_seed"])
                text = row.pop("state_json")
                if with_state:
                    row["state"] = json.loads(text)
                out.append(row)
        return out

    def growth(self) -> list[dict[str, Any]]:
        """One dict per sealed step: the `steps` row plus that step's rollout figures
        (mean reward, success rate, groups and the fraction of groups whose rewards all
        tie, a group being the rollouts of one state in one step)."""
        with self._read() as cur:
            cursor = cur.execute("SELECT * FROM steps ORDER BY step")
            names = [d[0] for d in cursor.description]
            steps = [dict(zip(names, v)) for v in cursor.fetchall()]
            per_step = {
                r[0]: r[1:] for r in cur.execute(
                    "SELECT step, AVG(reward), AVG(success) FROM events GROUP BY step"
                ).fetchall()
            }
            groups = {
                r[0]: r[1:] for r in cur.execute(
                    "SELECT step, COUNT(*), SUM(lo = hi) FROM (SELECT step, MIN(reward) AS lo, MAX(reward) AS hi "
                    "FROM events GROUP BY step, state_id) GROUP BY step"
                ).fetchall()
            }
        for row in steps:
            mean, rate = per_step.get(row["step"], (None, None))
            n_groups, tied = groups.get(row["step"], (0, 0))
            row.update(mean_reward=mean, success_rate=rate, groups=n_groups,
                       frac_zero_std_groups=(tied / n_groups) if n_groups else None)
        return steps

    def counts(self) -> dict[str, int]:
        """Live states, seeds, evicted-but-kept states, events and sealed steps."""
        with self._read() as cur:
            live, seeds = cur.execute(
                "SELECT COUNT(*), COALESCE(SUM(is_seed), 0) FROM states WHERE evicted_step IS NULL"
            ).fetchone()
            (evicted,) = cur.execute("SELECT COUNT(*) FROM states WHERE evicted_step IS NOT NULL").fetchone()
            (events,) = cur.execute("SELECT COUNT(*) FROM events").fetchone()
            (steps,) = cur.execute("SELECT COUNT(*) FROM steps").fetchone()
        return {"live_states": live, "seeds": seeds, "evicted_kept": evicted, "rollouts": events, "sealed_steps": steps}


def _load_state(state_id: str, text: str) -> State:
    try:
        state = State.from_dict(json.loads(text))
    except (ValueError, MleforgeError) as exc:  # bad JSON, or RecordError from the records' checks
        raise StateBufferError(f"state {state_id[:12]}... is stored malformed: {exc}") from exc
    if state.state_id != state_id:
        raise StateBufferError(f"state {state_id[:12]}... is stored with content hashing to {state.state_id[:12]}...")
    return state
