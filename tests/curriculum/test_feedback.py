"""Trace feedback: a finished GRPO step becomes statistics and new debug/improve states."""

from __future__ import annotations

import pytest

from mleforge.agent.execution import ExecutionSummary
from mleforge.curriculum.buffer import StateBuffer
from mleforge.curriculum.config import BufferConfig, LearnabilityConfig
from mleforge.curriculum.errors import CurriculumError, StateBufferError
from mleforge.curriculum.feedback import step_feedback
from mleforge.curriculum.records import SETUP_STEP
from mleforge.reward import compute_reward
from mleforge.sandbox.result import ExecutionResult
from tests.curriculum.helpers import CRASH, OK, child_state, idea_state

CODE = "```python\nprint('hello')\n```"


def result(stdout: str, returncode: int = 0) -> ExecutionResult:
    """The sandbox's record, as the executor returns it."""
    return ExecutionResult(
        run_id="r", task_id="alpha", returncode=returncode, signal=None, timed_out=False, killed_by=None,
        wall_s=2.0, cpu_s=1.0, peak_memory_mb=50.0, stdout=stdout, stderr="", stdout_bytes=len(stdout),
        stderr_bytes=0, submission_path="/tmp/sub.csv" if returncode == 0 else None, isolation="none",
    )


@pytest.fixture
def setup(tmp_path):
    buf = StateBuffer(tmp_path, BufferConfig(output_max_chars=100))
    draft = idea_state("alpha", 0)
    improve = child_state(idea_state("alpha", 1), "v", valid=True, score=0.6)
    buf.offer([draft, improve], seed=True)
    buf.seal(SETUP_STEP)
    return buf, draft, improve


def test_a_step_becomes_statistics_and_new_states(setup):
    buf, draft, improve = setup
    states = [draft, draft, draft, improve, improve]
    completions = ["plan\n" + CODE, "bad", "plan 2\n" + CODE.replace("hello", "x"),
                   "better\n" + CODE.replace("hello", "y"), "same\n" + CODE.replace("hello", "z")]
    executions = [result("x" * 1000), None, result("", returncode=1), OK, OK]
    rewards = [
        compute_reward("valid", score=0.7, reference=0.5, scale=0.1),  # valid draft: success
        compute_reward("format_error"),
        compute_reward("execution_error"),
        compute_reward("valid", score=0.8, reference=0.6, scale=0.1),  # improve above 0.5: success
        compute_reward("valid", score=0.6, reference=0.6, scale=0.1),  # improve at 0.5: no success
    ]
    summary = step_feedback(buf, 0, states, completions, executions, rewards, rollout_ids=list("abcde"))
    assert summary.applied and summary.rollouts == 5
    assert summary.new_states == 4  # every rollout that ran; the format error gives none
    rows = {r["state_id"]: r for r in buf.rows(with_state=True)}
    assert (rows[draft.state_id]["rollouts"], rows[draft.state_id]["successes"]) == (3, 1)
    assert (rows[improve.state_id]["rollouts"], rows[improve.state_id]["successes"]) == (2, 1)
    assert rows[improve.state_id]["best_score"] == 0.8
    new = [r for r in rows.values() if not r["is_seed"]]
    by_rollout = {r["rollout_id"]: r for r in new}
    assert set(by_rollout) == {"a", "c", "d", "e"}
    assert [by_rollout[k]["stage"] for k in "acde"] == ["improve", "debug", "improve", "improve"]
    assert by_rollout["a"]["parent_state_id"] == draft.state_id and by_rollout["a"]["policy_step"] == 0
    assert by_rollout["d"]["best_score"] == 0.8  # the journal's best after the rollout
    # the new state is the old journal plus the rollout's node, output capped head + tail
    (state,) = buf.get_states([by_rollout["a"]["state_id"]])
    node = state.target
    assert node.code.strip() == "print('hello')" and node.valid and node.score == 0.7 and node.parent_id is None
    assert len(node.execution.stdout) < 200 and "omitted" in node.execution.stdout
    (debug,) = buf.get_states([by_rollout["c"]["state_id"]])
    assert debug.stage == "debug" and debug.target.error == "execution_error"
    # replaying the step (a resumed run) changes nothing
    again = step_feedback(buf, 0, states, completions, executions, rewards, rollout_ids=list("abcde"))
    assert not again.applied and buf.counts()["rollouts"] == 5


def test_debug_rollouts_chain(setup):
    buf, draft, _ = setup
    step_feedback(buf, 0, [draft], ["p\n" + CODE], [CRASH], [compute_reward("execution_error")])
    debug = next(r for r in buf.rows() if r["stage"] == "debug")
    (state,) = buf.get_states([debug["state_id"]])
    fix = "fix\n" + CODE.replace("hello", "fixed")
    step_feedback(buf, 1, [state], [fix], [OK], [compute_reward("valid", score=0.7, reference=0.5, scale=0.1)],
                  errors=[None])
    improve = next(r for r in buf.rows(with_state=True) if r["stage"] == "improve" and r["policy_step"] == 1)
    assert len(improve["state"]["journal"]["nodes"]) == 2 and improve["parent_state_id"] == debug["state_id"]


def test_inconsistent_inputs_are_refused(setup):
    buf, draft, _ = setup
    with pytest.raises(CurriculumError, match="aligned"):
        step_feedback(buf, 0, [draft, draft], ["x"], [None], [compute_reward("format_error")])
    with pytest.raises(CurriculumError, match="the reward and the parse must agree"):
        step_feedback(buf, 0, [draft], ["no code here"], [ExecutionSummary(0, False, None, 1, "", "", True)],
                      [compute_reward("valid", score=0.7, reference=0.5, scale=0.1)])
    assert buf.counts()["rollouts"] == 0 and buf.sealed_step == SETUP_STEP


def test_no_buffer_growth_counts_rollouts_and_offers_nothing(setup):
    buf, draft, improve = setup
    summary = step_feedback(
        buf, 0, [draft, improve], ["p\n" + CODE, "q\n" + CODE.replace("hello", "x")], [OK, CRASH],
        [compute_reward("valid", score=0.7, reference=0.5, scale=0.1), compute_reward("execution_error")],
        offer_states=False,
    )
    assert (summary.rollouts, summary.new_states) == (2, 0)
    assert buf.counts()["live_states"] == 2 and buf.counts()["rollouts"] == 2


def test_feedback_none_keeps_the_score_out_of_new_states(setup):
    buf, draft, _ = setup
    reward = compute_reward("valid", score=0.7, reference=0.5, scale=0.1)
    step_feedback(buf, 0, [draft], ["p\n" + CODE], [OK], [reward], feedback="none")
    improve = next(r for r in buf.rows(with_state=True) if r["stage"] == "improve" and r["policy_step"] == 0)
    (node,) = improve["state"]["journal"]["nodes"]
    assert node["valid"] and node["score"] is None  # the prompt of this state shows no score
    with pytest.raises(Exception, match="feedback must be one of public, none"):
        step_feedback(buf, 1, [draft], ["p\n" + CODE], [OK], [reward], feedback="private")


def test_success_valid_counts_a_valid_improve_run_that_did_not_beat_the_best(tmp_path):
    """learnability.success "valid": the same step as above counts every valid run a success; the
    buffer keeps the kind it was made with and refuses another on reopening."""
    buf = StateBuffer(tmp_path, BufferConfig(), LearnabilityConfig(success="valid"))
    draft, improve = idea_state("alpha", 0), child_state(idea_state("alpha", 1), "v", valid=True, score=0.6)
    buf.offer([draft, improve], seed=True)
    buf.seal(SETUP_STEP)
    rewards = [compute_reward("valid", score=0.6, reference=0.6, scale=0.1),  # no change: a success here
               compute_reward("execution_error"),
               compute_reward("valid", score=0.5, reference=0.6, scale=0.1)]  # worse, still valid
    step_feedback(buf, 0, [improve] * 3, ["a\n" + CODE, "b\n" + CODE, "c\n" + CODE], [OK, CRASH, OK], rewards,
                  rollout_ids=list("abc"))
    row = {r["state_id"]: r for r in buf.rows()}[improve.state_id]
    assert (row["rollouts"], row["successes"]) == (3, 2)
    buf.close()
    assert StateBuffer(tmp_path).learnability.success == "valid"  # what it was made with
    assert StateBuffer(tmp_path, learnability=LearnabilityConfig(success="valid")).learnability.success == "valid"
    with pytest.raises(StateBufferError, match="counted its successes as learnability.success 'valid' and is "
                                               "opened with 'improve'"):
        StateBuffer(tmp_path, learnability=LearnabilityConfig())
