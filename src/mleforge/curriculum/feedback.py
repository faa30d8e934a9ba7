"""Trace feedback: a finished GRPO step becomes statistics and new states.

Each rollout becomes a Node appended to its state's journal; `State.after`
turns "journal + node" into the next state (a buggy node gives a debug state,
a valid node an improve state; a completion that ran nothing gives none). The
buffer then, in one transaction, counts every rollout, offers every new state
and seals the step (mleforge.curriculum.buffer.StateBuffer.apply_feedback).

Call it once per step with the results gathered from all ranks (e.g. on rank
0 after the trainer's gather), never per rank: the statistics would count a
rollout once per rank otherwise.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from mleforge.agent.actions import ActionFormatError, parse_completion
from mleforge.agent.execution import ExecutionSummary
from mleforge.agent.node import Node
from mleforge.agent.state import State
from mleforge.curriculum.buffer import FeedbackSummary, StateBuffer
from mleforge.curriculum.errors import CurriculumError
from mleforge.curriculum.learnability import is_success
from mleforge.curriculum.records import Offer, RolloutRecord
from mleforge.reward.compute import RewardBreakdown
from mleforge.tasks.answer_split import check_feedback


def rollout_node(
    state: State,
    completion: str,
    execution: Any,
    reward: RewardBreakdown,
    *,
    node_id: str,
    policy_step: int,
    created_at: float,
    error: str | None = None,
    output_max_chars: int | None = None,
    feedback: str = "public",
) -> Node | None:
    """The Node one rollout adds to `state`'s journal, or None when nothing ran.

    Its score is the reward's (the public score, `agent.step.RewardContext`); with
    `feedback="none"` the node keeps none, so later prompts built on it show no score.

    `execution` is the sandbox's ExecutionResult (or an ExecutionSummary);
    None, like a `format_error` reward, means the completion had no runnable
    action. The node is valid exactly when the reward's case is "valid".
    """
    if reward.case == "format_error" or execution is None:
        return None
    target = state.target
    try:
        action = parse_completion(completion, state.stage, None if target is None else target.code)
    except ActionFormatError as exc:
        raise CurriculumError(
            f"rollout {node_id}: its reward case is {reward.case!r}, but the completion has no action "
            f"({exc.reason}); the reward and the parse must agree"
        ) from exc
    if not isinstance(execution, ExecutionSummary):
        execution = ExecutionSummary.from_result(execution, max_chars=output_max_chars)
    valid = reward.case == "valid"
    return Node(
        id=node_id,
        stage=state.stage,
        plan=action.plan,
        code=action.code,
        parent_id=state.target_node_id,
        step=state.step,
        execution=execution,
        score=reward.score if valid and feedback == "public" else None,
        valid=valid,
        error=None if valid else (error or reward.case),
        created_at=created_at,
        metadata={"rollout_id": node_id, "policy_step": policy_step},
    )


def _node_id(state: State, rollout_id: str) -> str:
    """`rollout_id`, made unique within the state's journal (node ids are not hashed)."""
    node_id, n = rollout_id, 1
    while node_id in state.journal:
        node_id, n = f"{rollout_id}.{n}", n + 1
    return node_id


def step_feedback(
    buffer: StateBuffer,
    step: int,
    states: Sequence[State],
    completions: Sequence[str],
    executions: Sequence[Any],
    rewards: Sequence[RewardBreakdown],
    *,
    rollout_ids: Sequence[str] | None = None,
    errors: Sequence[str | None] | None = None,
    clock: Callable[[], float] = time.time,
    offer_states: bool = True,
    feedback: str = "public",
) -> FeedbackSummary:
    """Feed one finished GRPO step back to the buffer, in one transaction.

    The four sequences are aligned, one entry per rollout (a state appears G
    times, once per completion of its group). `errors` optionally gives each
    failed run's reason (the grader's, or the crash), shown later when the new
    debug state is prompted. Replaying an already-applied step does nothing.
    `offer_states=False` counts the rollouts but offers no new state: the
    buffer stays its seeds (the "no buffer growth" ablation).
    """
    n = len(states)
    if not (len(completions) == len(executions) == len(rewards) == n):
        raise CurriculumError(
            f"step {step}: {n} states, {len(completions)} completions, {len(executions)} executions and "
            f"{len(rewards)} rewards; they must be aligned, one per rollout"
        )
    rollout_ids = list(rollout_ids) if rollout_ids is not None else [f"s{step}r{i}" for i in range(n)]
    errors = list(errors) if errors is not None else [None] * n
    if len(rollout_ids) != n or len(errors) != n:
        raise CurriculumError(f"step {step}: rollout_ids and errors need one entry per rollout ({n})")
    now = clock()
    records, offers = [], []
    for state, completion, execution, reward, rid, error in zip(
        states, completions, executions, rewards, rollout_ids, errors
    ):
        records.append(RolloutRecord(
            state_id=state.state_id,
            reward=reward.total,
            success=is_success(state.stage, reward.case, reward.total, buffer.learnability.improve_neutral,
                               buffer.learnability.success),
            outcome=reward.case,
            score=reward.score if reward.case == "valid" else None,
            rollout_id=rid,
        ))
        node = rollout_node(
            state, completion, execution, reward, node_id=_node_id(state, rid), policy_step=step,
            created_at=now, error=error, output_max_chars=buffer.config.output_max_chars,
            feedback=check_feedback(feedback),
        )
        if node is not None and offer_states:
            nxt = State.after(state.journal.add(node), node)
            if nxt is not None:
                offers.append(Offer(nxt, parent_state_id=state.state_id, rollout_id=rid))
    return buffer.apply_feedback(step, records, offers)
