"""The StateBuffer: dedup, provenance, statistics, bounds and eviction, steps and snapshots."""

from __future__ import annotations

import json
import os
import sqlite3

import pytest

from mleforge.curriculum.buffer import StateBuffer
from mleforge.curriculum.config import BufferConfig, LearnabilityConfig
from mleforge.curriculum.errors import (
    SchemaVersionError,
    StateBufferError,
    StepNotSealed,
    StepSealed,
)
from mleforge.curriculum.learnability import snapshot_potentials
from mleforge.curriculum.records import SETUP_STEP, Offer, TaskReference
from mleforge.curriculum.seeds import journal_states, seed_from_journal, seed_task
from tests.curriculum.helpers import child_state, expert_journal, idea_state, rec

# No exploration term (and headroom off, the default): priorities are L, easy to order by hand.
FLAT = LearnabilityConfig(exploration_c=0.0)


def make(tmp_path, **kw) -> StateBuffer:
    return StateBuffer(tmp_path, BufferConfig(**kw), FLAT)


def test_layout_pragmas_and_stored_configs(tmp_path):
    buf = make(tmp_path, last_k=3)
    assert buf.path == tmp_path / "buffer.sqlite" and buf.path.is_file()
    conn = sqlite3.connect(buf.path)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    buf.close()
    again = StateBuffer(buf.path)  # the .sqlite path works too; configs come from the file
    assert again.config.last_k == 3 and again.learnability == FLAT


def test_a_reader_sees_the_writers_steps_and_cannot_write(tmp_path):
    """The other ranks of a multi-process run read the buffer the main process owns."""
    buf = make(tmp_path)
    with pytest.raises(StateBufferError, match="no state buffer"):
        StateBuffer(tmp_path / "elsewhere", writer=False)  # a reader creates nothing
    s = idea_state("alpha", 0)
    buf.offer([s], seed=True)
    buf.seal(SETUP_STEP)
    reader = StateBuffer(tmp_path, writer=False)
    assert reader.snapshot(SETUP_STEP).states == buf.snapshot(SETUP_STEP).states
    for write in (lambda: reader.offer([idea_state("alpha", 1)], seed=True), lambda: reader.seal(0),
                  lambda: reader.record([rec(s, 1.0)], step=0)):
        with pytest.raises(StateBufferError, match="rank 0"):
            write()
    with pytest.raises(sqlite3.OperationalError, match="readonly"):  # below the methods too (query_only)
        reader._conn.execute("DELETE FROM states")
    buf.apply_feedback(0, [rec(s, 1.0)], [])
    assert reader.snapshot(0, wait_s=1.0).rollouts_counted == 1  # the writer's step, as it sealed it
    assert reader.counts() == buf.counts() and reader.counts()["rollouts"] == 1
    reader.close()


def test_offer_dedupes_and_keeps_provenance(tmp_path):
    buf = make(tmp_path)
    seed = idea_state("alpha", 0)
    assert buf.offer([seed], seed=True) == [True]
    child = child_state(seed, "x", valid=False)
    assert buf.offer([Offer(child, parent_state_id=seed.state_id, rollout_id="r1")], step=0) == [True]
    # the same content from another rollout (other node id, time) is the same state
    same = child_state(seed, "x", valid=False)
    same = type(same).after(same.journal, same.target)  # rebuilt: equal content, equal id
    assert buf.offer([Offer(same, seed.state_id, "r2")], step=0) == [False]
    rows = {r["state_id"]: r for r in buf.rows()}
    row = rows[child.state_id]
    assert (row["parent_state_id"], row["rollout_id"], row["policy_step"], row["offers"]) == (
        seed.state_id, "r1", 0, 2)
    assert row["stage"] == "debug" and not row["is_seed"] and row["added_step"] == 0
    assert rows[seed.state_id]["is_seed"] and rows[seed.state_id]["policy_step"] is None
    assert rows[seed.state_id]["added_step"] == SETUP_STEP
    assert buf.get_states([child.state_id, seed.state_id]) == [child, seed]
    # a live state offered as a seed becomes one
    buf.offer([child], seed=True)
    assert {r["state_id"]: r for r in buf.rows()}[child.state_id]["is_seed"]


def test_statistics_updates(tmp_path):
    buf = make(tmp_path, last_k=3)
    improve = child_state(idea_state("alpha", 0), "v", valid=True, score=0.6)
    lower = child_state(idea_state("beta", 0, direction="lower"), "v", valid=True, score=0.6)
    buf.offer([improve, lower], seed=True)
    buf.record([rec(improve, 0.25), rec(improve, 0.75, score=0.7), rec(improve, 0.5, score=0.55),
                rec(improve, 1.0, score=0.9), rec(lower, 0.9, score=0.4), rec(lower, 0.1, score=0.8)], step=0)
    rows = {r["state_id"]: r for r in buf.rows()}
    r = rows[improve.state_id]
    assert (r["rollouts"], r["successes"]) == (4, 2)
    assert r["reward_sum"] == 2.5 and r["reward_sumsq"] == 0.0625 + 0.5625 + 0.25 + 1.0
    assert r["last_rewards"] == [0.75, 0.5, 1.0]  # last K = 3, oldest first
    assert r["best_score"] == 0.9 and r["journal_best"] == 0.6 and r["last_sampled_step"] == 0
    assert rows[lower.state_id]["best_score"] == 0.4  # lower is better
    buf.record([rec(improve, 0.0)], step=3)
    assert {r["state_id"]: r for r in buf.rows()}[improve.state_id]["last_sampled_step"] == 3


def test_record_is_all_or_nothing(tmp_path):
    buf = make(tmp_path)
    s = idea_state("alpha", 0)
    buf.offer([s], seed=True)
    with pytest.raises(StateBufferError, match="not in the buffer"):
        buf.record([rec(s, 1.0), rec("f" * 64, 1.0)], step=0)
    assert buf.counts()["rollouts"] == 0 and buf.rows()[0]["rollouts"] == 0


def test_eviction_lowest_priority_then_oldest_and_seeds_stay(tmp_path):
    buf = make(tmp_path, max_states_per_task=4)
    seeds = [idea_state("alpha", i) for i in (100, 101)]
    buf.offer(seeds, seed=True)
    buf.seal(SETUP_STEP)
    a, b, c, d, e = (idea_state("alpha", i) for i in range(5))
    buf.offer([a, b, c, d, e], step=0)  # inserted in this order: a is the oldest
    buf.record([rec(s, 0.0) for s in seeds for _ in range(10)], step=0)
    buf.record([rec(a, 1.0) for _ in range(10)], step=0)
    buf.record([rec(b, 1.0) for _ in range(5)] + [rec(b, 0.0) for _ in range(5)], step=0)
    buf.seal(0)
    # All seven are alpha drafts, one pool: S = 15 of N = 40, q = 16/42 = 8/21; m = 2, G = 8.
    #   seeds 0 of 10: Beta(16/21, 236/21), L = 0.338, the lowest of all, yet never evicted
    #   a 10 of 10:    Beta(226/21, 26/21), L = 0.495, the lowest of the rest
    #   c, d, e untried: Beta(16/21, 26/21), L = 0.740 (uncertain: lower than b's)
    #   b 5 of 10:     Beta(121/21, 131/21), L = 0.965
    rows = {r["state_id"]: r for r in buf.rows(include_evicted=True)}
    assert rows[seeds[0].state_id]["priority"] == pytest.approx(0.33826535, abs=1e-8)
    assert rows[a.state_id]["priority"] == pytest.approx(0.49463304, abs=1e-8)
    assert rows[c.state_id]["priority"] == pytest.approx(0.74047280, abs=1e-8)
    assert rows[b.state_id]["priority"] == pytest.approx(0.96527035, abs=1e-8)
    # 7 live, bound 4: evict a (lowest), then the oldest of the tie c, d, e: c, then d
    live = {r["state_id"] for r in buf.rows()}
    assert live == {seeds[0].state_id, seeds[1].state_id, b.state_id, e.state_id}
    evicted = {sid: r["evicted_step"] for sid, r in rows.items() if r["evicted_step"] is not None}
    assert evicted == {a.state_id: 0, c.state_id: 0, d.state_id: 0}
    assert buf.growth()[-1]["evicted"] == 3


def test_eviction_ranks_by_the_samplers_lp_with_every_rollout_counted(tmp_path):
    buf = StateBuffer(tmp_path, BufferConfig(max_states_per_task=2), LearnabilityConfig(exploration_c=0.3))
    seed, x, y = idea_state("alpha", 0), idea_state("alpha", 1), idea_state("alpha", 2)
    buf.set_up([], [seed])
    buf.apply_feedback(0, [rec(seed, 0.0)] * 4, [Offer(x), Offer(y)])  # 3 live, bound 2: one goes
    buf.apply_feedback(1, [rec(seed, 1.0)] * 2, [])
    snap = buf.snapshot(1)
    assert len(snap) == 2 and snap.total_rollouts == 6
    evicted = [r for r in buf.rows(include_evicted=True) if r["evicted_step"] is not None]
    assert len(evicted) == 1
    # every live state's cached priority is exactly the LP the sampler computes from the snapshot
    lp = {s.state_id: p.LP for s, p in zip(snap.states, snapshot_potentials(snap, buf.learnability))}
    assert {r["state_id"]: r["priority"] for r in buf.rows()} == pytest.approx(lp, abs=1e-12)
    # rollouts of an evicted state still count in N: record 5 on it, the snapshot sees 11
    buf.record([rec(evicted[0]["state_id"], 1.0)] * 5, step=2)
    buf.seal(2)
    assert buf.snapshot(2).total_rollouts == 11
    assert sum(s.rollouts for s in buf.snapshot(2).states) == 6
    assert buf.snapshot(1).total_rollouts == 6  # as of its step, whenever read


def test_a_buffer_made_before_the_beta_variant_keeps_the_laplace_lp(tmp_path):
    buf = make(tmp_path)
    buf.close()
    conn = sqlite3.connect(tmp_path / "buffer.sqlite")
    old = {"exploration_c": 0.1, "headroom_gamma": 1.0, "improve_neutral": 0.5, "variant": "binary",
           "variance_prior_weight": 2.0}
    conn.execute("UPDATE meta SET value = ? WHERE key = 'learnability_config'", (json.dumps(old),))
    conn.commit()
    conn.close()
    again = StateBuffer(tmp_path)
    assert again.learnability == LearnabilityConfig(variant="laplace", headroom_gamma=1.0)


def test_total_bound_and_seeds_beyond_the_bound(tmp_path):
    buf = make(tmp_path, max_states=3)
    buf.offer([idea_state("alpha", i) for i in range(4)], seed=True)
    buf.offer([idea_state("beta", i) for i in range(2)], step=SETUP_STEP)
    buf.seal(SETUP_STEP)
    rows = buf.rows()
    assert len(rows) == 4 and all(r["is_seed"] for r in rows)  # seeds alone exceed the bound: kept


def test_evicted_states_stay_in_older_snapshots_then_get_deleted(tmp_path):
    buf = make(tmp_path, max_states_per_task=1)
    buf.offer([idea_state("alpha", 0)], seed=True)
    buf.seal(SETUP_STEP)
    old = idea_state("alpha", 1)
    buf.apply_feedback(0, [], [Offer(old)])  # 2 live, bound 1: the new one goes at once
    assert old.state_id not in buf.snapshot(0).state_ids  # added and evicted at 0: never visible
    # an evicted state stays in the snapshots of the steps before its eviction
    buf2 = make(tmp_path / "b", max_states_per_task=2, retain_evicted_steps=2)
    buf2.offer([idea_state("alpha", 0)], seed=True)
    buf2.seal(SETUP_STEP)
    first = idea_state("alpha", 1)
    buf2.apply_feedback(0, [], [Offer(first)])
    buf2.record([rec(first, 1.0) for _ in range(20)], step=1)  # solved: lowest priority
    buf2.apply_feedback(1, [], [Offer(idea_state("alpha", 2))])
    assert first.state_id in buf2.snapshot(0).state_ids
    assert first.state_id not in buf2.snapshot(1).state_ids
    for step in (2, 3):
        buf2.apply_feedback(step, [], [])
    # deleted once evicted_step <= sealed - retain (1 <= 3 - 2); older snapshots are refused
    assert first.state_id not in {r["state_id"] for r in buf2.rows(include_evicted=True)}
    with pytest.raises(StateBufferError, match="is gone"):
        buf2.snapshot(0)
    buf2.snapshot(1)


def test_snapshot_is_as_of_its_step_whenever_it_is_read(tmp_path):
    buf = make(tmp_path, last_k=2)
    s = idea_state("alpha", 0)
    buf.offer([s], seed=True)
    buf.seal(SETUP_STEP)
    buf.apply_feedback(0, [rec(s, 1.0, score=0.7), rec(s, 0.0)], [Offer(idea_state("alpha", 1))])
    before = buf.snapshot(0)
    # step 1's feedback lands: the snapshot of step 0 must not change
    buf.apply_feedback(1, [rec(s, 0.5, score=0.9), rec(s, 0.25, score=0.8)], [Offer(idea_state("alpha", 2))])
    assert buf.snapshot(0) == before
    (stats,) = [x for x in before.states if x.state_id == s.state_id]
    assert (stats.rollouts, stats.successes, stats.last_rewards, stats.best_score) == (2, 1, (1.0, 0.0), 0.7)
    assert len(before) == 2 and len(buf.snapshot(1)) == 3
    assert list(before.state_ids) == sorted(before.state_ids)
    now = {x.state_id: x for x in buf.snapshot(1).states}[s.state_id]
    assert (now.rollouts, now.last_rewards, now.best_score) == (4, (0.5, 0.25), 0.9)


def test_steps_are_sealed_in_order(tmp_path):
    buf = make(tmp_path)
    s = idea_state("alpha", 0)
    buf.offer([s], seed=True)
    with pytest.raises(StepNotSealed, match=r"buffer.seal\(-1\)"):
        buf.snapshot(SETUP_STEP)
    assert buf.seal(SETUP_STEP) and not buf.seal(SETUP_STEP)  # idempotent
    done = buf.apply_feedback(0, [rec(s, 1.0)], [])
    assert done.applied and done.rollouts == 1
    replay = buf.apply_feedback(0, [rec(s, 1.0)], [])  # a resumed run replays step 0: no-op
    assert not replay.applied and buf.counts()["rollouts"] == 1
    with pytest.raises(StepSealed):
        buf.record([rec(s, 1.0)], step=0)
    with pytest.raises(StepSealed):
        buf.offer([idea_state("alpha", 9)], step=0)
    with pytest.raises(StepNotSealed):
        buf.snapshot(1, wait_s=0.1)
    # a seed offered mid-run joins at the next unsealed step, not retroactively
    late = idea_state("beta", 0)
    buf.offer([late], seed=True)
    assert late.state_id not in buf.snapshot(0).state_ids
    buf.seal(1)
    assert late.state_id in buf.snapshot(1).state_ids
    assert [g["step"] for g in buf.growth()] == [-1, 0, 1]


def test_seed_from_journal(tmp_path):
    buf = make(tmp_path)
    journal = expert_journal()
    states = journal_states(journal)
    assert [s.stage for s in states] == ["draft", "debug", "improve", "draft"]
    assert [len(s.journal) for s in states] == [0, 1, 2, 3]
    assert states[1].target_node_id == "a" and states[2].target_node_id == "b"
    assert seed_from_journal(buf, journal) == [True] * 4
    assert seed_task(buf, "alpha", "higher") is False  # the empty-journal draft is already there
    rows = buf.rows()
    assert len(rows) == 4 and all(r["is_seed"] for r in rows)
    best = {r["stage"]: r["best_score"] for r in rows if r["stage"] != "draft"}
    assert best == {"debug": None, "improve": 0.7}


def test_references_and_priorities(tmp_path):
    buf = StateBuffer(tmp_path, learnability=LearnabilityConfig(exploration_c=0.0, headroom_gamma=1.0))
    near_top = child_state(idea_state("alpha", 0), "v", valid=True, score=0.95)
    buf.register_task(TaskReference("alpha", "higher", top=1.0, baseline=0.5))
    buf.offer([near_top], seed=True)
    # untried, no peers: Beta(1, 1), L = 1 - 2/9 = 7/9; H = 1 - 0.45 / 0.5 = 0.1; gamma 1: LP 7/90
    assert buf.rows()[0]["priority"] == pytest.approx(7 / 90)
    assert buf.tasks()["alpha"].top == 1.0


def test_schema_version_and_bad_files(tmp_path):
    buf = make(tmp_path)
    conn = sqlite3.connect(buf.path)
    conn.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    conn.commit()
    conn.close()
    buf.close()
    with pytest.raises(SchemaVersionError, match="schema version 99"):
        StateBuffer(tmp_path)
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"not a database at all" * 100)
    with pytest.raises(StateBufferError, match="not a readable state buffer"):
        StateBuffer(junk)
    with pytest.raises(StateBufferError, match="no state buffer"):
        StateBuffer(tmp_path / "missing", create=False)


def test_malformed_state_json_is_reported(tmp_path):
    buf = make(tmp_path)
    s = idea_state("alpha", 0)
    buf.offer([s], seed=True)
    conn = sqlite3.connect(buf.path)
    data = s.to_dict()
    data["ideas"] = ["changed"]
    conn.execute("UPDATE states SET state_json = ?", (json.dumps(data),))
    conn.commit()
    conn.close()
    with pytest.raises(StateBufferError, match="hashing to"):
        buf.get_states([s.state_id])


def test_a_forked_child_uses_its_own_connection(tmp_path):
    buf = make(tmp_path)
    buf.offer([idea_state("alpha", 0)], seed=True)
    pid = os.fork()
    if pid == 0:  # child: write through the inherited object, then leave without cleanup
        try:
            buf.offer([idea_state("alpha", 1)], seed=True)
            os._exit(0)
        except BaseException:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert buf.counts()["live_states"] == 2


def test_set_up_is_one_transaction_and_runs_once(tmp_path):
    buf = make(tmp_path)
    ref = TaskReference("alpha", "higher", top=1.0, baseline=0.5)
    seeds = [idea_state("alpha", 0), idea_state("alpha", 1)]
    # the second "seed" breaks mid-way, after the reference and the first seed were written
    with pytest.raises(AttributeError):
        buf.set_up([ref], [seeds[0], Offer("not a state")])
    assert buf.sealed_step is None and buf.rows() == [] and buf.tasks() == {}
    assert buf.set_up([ref], seeds) is True
    assert buf.sealed_step == SETUP_STEP and buf.tasks() == {"alpha": ref}
    # a restart runs set-up again: nothing changes, no seed counts a second offer
    assert buf.set_up([ref], seeds) is False
    rows = buf.rows()
    assert sorted(r["state_id"] for r in rows) == sorted(s.state_id for s in seeds)
    assert [(r["is_seed"], r["offers"], r["added_step"]) for r in rows] == [(1, 1, SETUP_STEP)] * 2
    assert [g["step"] for g in buf.growth()] == [SETUP_STEP] and buf.growth()[0]["seeds"] == 2
    assert len(buf.snapshot(SETUP_STEP)) == 2


def test_set_up_tasks_from_built_in_tasks_and_an_expert_journal(tmp_path, prepared_registry):
    from mleforge.agent.state import State
    from mleforge.curriculum.seeds import set_up_tasks, task_reference

    tasks = [prepared_registry.get("penguins"), prepared_registry.get("diabetes")]
    buf = make(tmp_path)
    journal = expert_journal("penguins")
    assert set_up_tasks(buf, tasks, [journal]) is True
    assert set_up_tasks(buf, tasks, [journal]) is False
    refs = buf.tasks()
    assert refs == {t.id: task_reference(t) for t in tasks}
    assert refs["penguins"].direction == "higher" and refs["diabetes"].direction == "lower"
    ids = {r["state_id"] for r in buf.rows()}
    drafts = {State.draft(t.id, direction=refs[t.id].direction).state_id for t in tasks}
    assert ids == drafts | {s.state_id for s in journal_states(journal)}
    # penguins' empty draft is both the task's seed and the journal's first state: offered twice,
    # once per source, and never again by the second set_up_tasks
    twice = State.draft("penguins", direction="higher").state_id
    assert buf.sealed_step == SETUP_STEP
    assert {r["state_id"]: r["offers"] for r in buf.rows()} == {sid: 1 + (sid == twice) for sid in ids}


def test_set_up_tasks_keeps_the_journal_states_of_the_chosen_stages(tmp_path, prepared_registry):
    from mleforge.agent.state import State
    from mleforge.curriculum.seeds import set_up_tasks

    task = prepared_registry.get("penguins")
    buf = make(tmp_path)
    journal = expert_journal("penguins")
    other = prepared_registry.get("titanic")  # no journal: its draft is its only seed
    set_up_tasks(buf, [task, other], [journal], stages=("debug", "improve"))
    kept = [s for s in journal_states(journal) if s.stage != "draft"]
    assert len(kept) == 2
    # penguins' draft is left out (a draft's whole script is not what these stages train)
    assert {r["state_id"] for r in buf.rows()} == {State.draft("titanic", direction="higher").state_id} | {
        s.state_id for s in kept}
