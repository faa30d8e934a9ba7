"""Nodes, journals and states: JSON round trips, the tree's views, and the state hash."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from types import SimpleNamespace

import pytest

from mleforge.agent.execution import ExecutionSummary, trim_head_tail
from mleforge.agent.fields import RecordError
from mleforge.agent.journal import Journal
from mleforge.agent.node import Node
from mleforge.agent.state import State


def run(returncode=0, stdout="val acc 0.8\n", stderr="", submission=True, **kw) -> ExecutionSummary:
    return ExecutionSummary(
        returncode=returncode,
        timed_out=kw.get("timed_out", False),
        killed_by=kw.get("killed_by"),
        wall_s=kw.get("wall_s", 1.5),
        stdout=stdout,
        stderr=stderr,
        submission_written=submission,
    )


def crash(msg="KeyError: 'Age'") -> ExecutionSummary:
    return run(1, "", f"Traceback (most recent call last):\n{msg}\n", submission=False)


def journal(direction="higher", created=0.0, wall=1.5, ids=("a", "b", "c", "d")) -> Journal:
    """draft a (valid .80) -> improve b (valid .85); draft c (crash) -> debug d (valid .78)."""
    a, b, c, d = ids
    nodes = [
        Node(a, "draft", "random forest", "rf()\n", step=0, execution=run(wall_s=wall), score=0.80,
             valid=True, created_at=created, metadata={"policy": "template", "tokens": 120}),
        Node(b, "improve", "more trees", "rf(500)\n", parent_id=a, step=1, execution=run(wall_s=wall),
             score=0.85, valid=True, created_at=created + 1),
        Node(c, "draft", "logistic regression", "lr(\n", step=2, execution=crash(),
             error="exit code 1", created_at=created + 2),
        Node(d, "debug", "fix the paren", "lr()\n", parent_id=c, step=3, execution=run(wall_s=wall),
             score=0.78, valid=True, created_at=created + 3),
    ]
    out = Journal("titanic", direction)
    for node in nodes:
        out = out.add(node)
    return out


def test_execution_summary_round_trip_and_from_result():
    ex = run(None, "out", "err", submission=False, timed_out=True, killed_by="timeout", wall_s=600.25)
    assert ExecutionSummary.from_dict(json.loads(json.dumps(ex.to_dict()))) == ex
    assert not ex.succeeded and run().succeeded
    result = SimpleNamespace(returncode=0, timed_out=False, killed_by=None, wall_s=2, stdout="x" * 100,
                             stderr=b"warn", submission_path="/w/submission/submission.csv")
    summary = ExecutionSummary.from_result(result, max_chars=20)
    assert summary.submission_written and summary.stderr == "warn" and summary.wall_s == 2.0
    assert summary.stdout.startswith("x" * 10) and "80 characters omitted" in summary.stdout
    assert not ExecutionSummary.from_result(replace_ns(result, submission_path=None)).submission_written


def replace_ns(ns, **kw):
    return SimpleNamespace(**{**vars(ns), **kw})


def test_trim_head_tail():
    assert trim_head_tail("abcdef", 3, 3) == "abcdef"
    assert trim_head_tail("abcdefgh", 2, 3) == "ab\n[... 3 characters omitted ...]\nfgh"
    assert trim_head_tail("abcdefgh", 2, 0) == "ab\n[... 6 characters omitted ...]\n"


def test_node_validation():
    with pytest.raises(RecordError, match="draft has no parent"):
        Node("x", "draft", "", "", parent_id="y")
    with pytest.raises(RecordError, match="needs one"):
        Node("x", "debug", "", "")
    with pytest.raises(RecordError, match="stage must be"):
        Node("x", "explore", "", "")
    # A valid node of a run with feedback "none" has no score; a score needs a valid node.
    assert Node("x", "draft", "", "", valid=True).score is None
    with pytest.raises(RecordError, match="finite value"):
        Node("x", "draft", "", "", valid=True, score=float("nan"))
    with pytest.raises(RecordError, match="needs a valid node"):
        Node("x", "draft", "", "", valid=False, score=0.5)


def test_node_outcomes():
    assert Node("x", "draft", "", "", execution=None).outcome == "format_error"
    assert Node("x", "draft", "", "", execution=crash()).outcome == "execution_error"
    timed = run(None, timed_out=True, killed_by="timeout", submission=False)
    assert Node("x", "draft", "", "", execution=timed).outcome == "timeout"
    assert Node("x", "draft", "", "", execution=run(), error="bad rows").outcome == "invalid_submission"
    valid = Node("x", "draft", "", "", execution=run(), valid=True, score=1.0)
    assert valid.outcome == "valid" and not valid.is_buggy


def test_node_metadata_is_copied():
    meta = {"policy": "openai"}
    node = Node("x", "draft", "", "", metadata=meta)
    meta["policy"] = "changed"
    assert node.metadata == {"policy": "openai"}
    assert hash(node) == hash(Node("x", "draft", "p", "c"))


def test_journal_views():
    j = journal()
    assert len(j) == 4 and "a" in j and "z" not in j
    assert [n.id for n in j.draft_nodes] == ["a", "c"]
    assert [n.id for n in j.buggy_nodes] == ["c"]
    assert [n.id for n in j.good_nodes] == ["a", "b", "d"]
    assert [n.id for n in j.children("a")] == ["b"] and j.children("b") == ()
    assert [n.id for n in j.leaves] == ["b", "d"]
    assert j.best_node().id == "b" and j.best_score == 0.85
    assert journal("lower").best_node().id == "d"
    assert j.debug_depth("d") == 1 and j.debug_depth("b") == 0
    assert j.position("c") == 2
    with pytest.raises(RecordError, match="no node 'z'"):
        j.get("z")


def test_best_node_ties_and_empty():
    assert Journal("t", "higher").best_node() is None
    j = Journal("t", "lower")
    for i in range(3):
        j = j.add(Node(f"n{i}", "draft", "", "", execution=run(), valid=True, score=0.5))
    assert j.best_node().id == "n0"  # the earliest among ties


def test_journal_is_immutable_and_validated():
    j = journal()
    bigger = j.add(Node("e", "improve", "", "", parent_id="b", execution=crash()))
    assert len(j) == 4 and len(bigger) == 5
    with pytest.raises(RecordError, match="appears twice"):
        j.add(Node("a", "draft", "", ""))
    with pytest.raises(RecordError, match="not an earlier node"):
        j.add(Node("e", "debug", "", "", parent_id="nope"))
    with pytest.raises(RecordError, match="higher or lower"):
        Journal("t", "up")


def test_journal_round_trip_and_atomic_save(tmp_path):
    j = journal()
    assert Journal.from_dict(json.loads(json.dumps(j.to_dict()))) == j
    path = j.save(tmp_path / "runs" / "journal.json")
    assert Journal.load(path) == j
    assert os.listdir(path.parent) == ["journal.json"]  # no temporary file left behind
    j.add(Node("e", "draft", "", "")).save(path)  # overwrite in place
    assert len(Journal.load(path)) == 5


def test_journal_load_errors(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(RecordError, match="cannot read journal"):
        Journal.load(bad)
    data = journal().to_dict()
    with pytest.raises(RecordError, match="version 9"):
        Journal.from_dict({**data, "version": 9})
    with pytest.raises(RecordError, match="not a journal"):
        Journal.from_dict({**data, "format": "other"})
    nodes = [dict(data["nodes"][0], valid="yes")]
    with pytest.raises(RecordError, match="key `valid`"):
        Journal.from_dict({**data, "nodes": nodes})
    with pytest.raises(RecordError, match="missing key `code`"):
        Journal.from_dict({**data, "nodes": [{k: v for k, v in data["nodes"][0].items() if k != "code"}]})


def test_state_constructors_and_validation():
    j = journal()
    draft = State.draft("titanic", ideas=["use name titles"])
    assert draft.stage == "draft" and draft.step == 0 and draft.target is None and draft.ideas == ("use name titles",)
    assert State.debug(j, "c").target.id == "c" and State.improve(j, "b").step == 4
    empty_lower = Journal("titanic", "lower")
    assert State.draft("titanic", journal=empty_lower).journal is empty_lower
    with pytest.raises(RecordError, match="is valid"):
        State.debug(j, "b")
    with pytest.raises(RecordError, match="is buggy"):
        State.improve(j, "c")
    with pytest.raises(RecordError, match="no node"):
        State.improve(j, "z")
    with pytest.raises(RecordError, match="journal of task titanic"):
        State("penguins", "draft", j)
    never_ran = j.add(Node("e", "draft", "", ""))
    with pytest.raises(RecordError, match="never ran"):
        State.debug(never_ran, "e")


def test_state_after_a_rollout():
    j = journal()
    assert State.after(j, j.get("c")).stage == "debug"
    assert State.after(j, j.get("d")) == State.improve(j, "d")
    format_error = Node("e", "draft", "", "")
    assert State.after(j.add(format_error), format_error) is None
    with pytest.raises(RecordError, match="differs"):
        State.after(j, replace(j.get("d"), code="other"))


def test_state_round_trip():
    for state in (State.draft("titanic", ("a", "b")), State.debug(journal(), "c"), State.improve(journal(), "b")):
        data = json.loads(json.dumps(state.to_dict()))
        back = State.from_dict(data)
        assert back == state and back.state_id == state.state_id == data["state_id"]


def test_state_id_ignores_run_specific_fields():
    """Node ids, timestamps, wall times, steps and metadata differ between runs; the prompt does not."""
    one = State.improve(journal(created=1000.0, wall=1.5), "b")
    other_ids = ("n1", "n2", "n3", "n4")
    two_journal = journal(created=2_000_000.0, wall=99.0, ids=other_ids)
    two_journal = Journal(two_journal.task_id, "lower", tuple(
        replace(n, step=n.step + 10, metadata={"policy": "other"}) for n in two_journal.nodes
    ))
    two = State.improve(two_journal, "n2")
    assert one.state_id == two.state_id
    # Equality stays field by field (the records differ); the buffer dedupes by state_id.
    assert hash(one) == hash(two) and one != two


@pytest.mark.parametrize("change", ["code", "plan", "score", "stdout", "error", "target", "ideas", "stage", "task"])
def test_state_id_changes_with_content(change):
    j = journal()
    base = State.improve(j, "b")

    def with_node(node_id, **kw):
        return Journal(j.task_id, j.direction, tuple(replace(n, **kw) if n.id == node_id else n for n in j.nodes))

    changed = {
        "code": lambda: State.improve(with_node("a", code="rf(10)\n"), "b"),
        "plan": lambda: State.improve(with_node("b", plan="even more trees"), "b"),
        "score": lambda: State.improve(with_node("a", score=0.81), "b"),
        "stdout": lambda: State.improve(with_node("b", execution=run(stdout="val acc 0.9\n")), "b"),
        "error": lambda: State.improve(with_node("c", error="exit code 2"), "b"),
        "target": lambda: State.improve(j, "a"),
        "ideas": lambda: State("titanic", "improve", j, "b", ("try boosting",)),
        "stage": lambda: State.debug(j, "c"),
        "task": lambda: State.draft("penguins"),
    }[change]()
    assert changed.state_id != base.state_id


def test_draft_state_id_is_stable():
    # A seed state must hash the same in every process and every run: pin it.
    a = State.draft("titanic")
    assert a.state_id == State.draft("titanic", direction="lower").state_id
    assert a.state_id != State.draft("titanic", ideas=("x",)).state_id
    content = a.hash_content()
    assert content == {"v": 1, "task_id": "titanic", "stage": "draft", "ideas": [], "target": None, "journal": []}


def test_an_execution_records_its_isolation_but_prompts_do_not_show_it():
    from types import SimpleNamespace

    result = SimpleNamespace(returncode=0, timed_out=False, killed_by=None, wall_s=1.0, stdout="", stderr="",
                             submission_path=None, isolation="bwrap")
    ex = ExecutionSummary.from_result(result)
    assert ex.isolation == "bwrap" and ex.to_dict()["isolation"] == "bwrap"
    assert ExecutionSummary.from_dict(json.loads(json.dumps(ex.to_dict()))) == ex
    assert "isolation" not in ex.content()
    old = {k: v for k, v in ex.to_dict().items() if k != "isolation"}  # a journal from before
    assert ExecutionSummary.from_dict(old).isolation is None
