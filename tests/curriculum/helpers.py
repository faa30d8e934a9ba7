"""Small builders for the curriculum tests: real records, made quickly."""

from __future__ import annotations

from mleforge.agent.execution import ExecutionSummary
from mleforge.agent.journal import Journal
from mleforge.agent.node import Node
from mleforge.agent.state import State
from mleforge.curriculum.records import RolloutRecord

OK = ExecutionSummary(0, False, None, 1.0, "val 0.8\n", "", True)
CRASH = ExecutionSummary(1, False, None, 1.0, "", "Traceback: KeyError 'Age'\n", False)


def idea_state(task: str, i: int, direction: str = "higher") -> State:
    """A distinct draft state per i (ideas are hashed): cheap bulk states."""
    return State.draft(task, ideas=(f"idea {i}",), direction=direction)


def child_state(parent: State, tag: str, valid: bool, score: float | None = None) -> State:
    """The state one rollout of `parent` leads to (debug when buggy, improve when valid)."""
    node = Node(
        id=f"n-{tag}", stage=parent.stage, plan=f"plan {tag}", code=f"print('{tag}')",
        parent_id=parent.target_node_id, step=parent.step, execution=OK if valid else CRASH,
        score=score if valid else None, valid=valid, error=None if valid else "execution_error",
    )
    return State.after(parent.journal.add(node), node)


def expert_journal(task: str = "alpha") -> Journal:
    """draft (buggy) -> debug (valid 0.7) -> improve (valid 0.8), plus a second draft (valid 0.6)."""
    nodes = [
        Node("a", "draft", "p", "x = 1/0", execution=CRASH, error="ZeroDivisionError"),
        Node("b", "debug", "p", "x = 1", parent_id="a", step=1, execution=OK, score=0.7, valid=True),
        Node("c", "improve", "p", "x = 2", parent_id="b", step=2, execution=OK, score=0.8, valid=True),
        Node("d", "draft", "p", "x = 3", step=3, execution=OK, score=0.6, valid=True),
    ]
    return Journal(task, "higher", tuple(nodes))


def rec(state: State | str, reward: float, success: bool | None = None, score: float | None = None,
        outcome: str | None = None) -> RolloutRecord:
    sid = state if isinstance(state, str) else state.state_id
    outcome = outcome or ("valid" if score is not None or reward > 0 else "execution_error")
    return RolloutRecord(sid, reward, bool(reward > 0.5) if success is None else success, outcome, score)
