"""A rollout whose script writes a hostile submission earns a failure reward: nothing it
writes raises out of `ExecutingReward.rollout` and stops training (issue 31); a broken
executor still loses the rollout (None), as infrastructure."""

from __future__ import annotations

import pytest

from mleforge.agent.state import State
from mleforge.reward import RewardConfig
from mleforge.sandbox import make_executor
from mleforge.train.grpo.executing_reward import ExecutingReward

REWARDS = RewardConfig(r_format=-0.3, r_fail=-0.2, r_invalid=-0.1)
DRAFT = State.draft("titanic", direction="higher")


def completion(body: str) -> str:
    return f"Write a hostile submission.\n```python\n{body}\n```"


HOSTILE = {
    "probabilities": 'import pandas as pd\nsub = pd.read_csv("input/sample_submission.csv")\n'
                     'sub["Survived"] = 0.5\nsub.to_csv("submission/submission.csv", index=False)',
    "carriage_return": 'open("submission/submission.csv", "w", newline="").write("PassengerId,Surv\\rived\\n1,0\\n")',
    "half_a_million_fields": 'open("submission/submission.csv", "w").write("PassengerId,Survived\\n" + "1," * 533552)',
    "closed_folder": 'import os, shutil\nshutil.copy("input/sample_submission.csv", "submission/submission.csv")\n'
                     'os.chmod("submission/submission.csv", 0)\nos.chmod("submission", 0o500)',
    "random_bytes": 'open("submission/submission.csv", "wb").write(bytes(range(256)) * 40)',
}


@pytest.fixture(scope="module")
def reward(titanic):
    with make_executor("local") as executor:
        reward = ExecutingReward({"titanic": titanic}, executor, lambda step: {DRAFT.state_id: DRAFT},
                                 reward=REWARDS)
        yield reward
        reward.close()


@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_a_hostile_submission_is_a_failure_reward_not_an_exception(kind, reward):
    rollout = reward.rollout(0, 0, 0, DRAFT, completion(HOSTILE[kind]), 10)
    assert rollout.lost is None and rollout.outcome is not None
    report = rollout.outcome.report
    if kind == "closed_folder":  # the parent takes its own file back: the sample, valid (0.5)
        assert report.valid_submission and rollout.reward == 0.5, report.invalid_reason
        return
    assert rollout.outcome.node.outcome == "invalid_submission", rollout.outcome.node.error
    assert rollout.reward == REWARDS.failure_reward("invalid_submission")
    assert not report.valid_submission and report.grader_error is None and report.invalid_reason


class BrokenExecutor:
    """An executor that breaks as infrastructure (an OSError of its own)."""

    def run(self, script, task, limits=None, **kw):
        raise PermissionError(13, "Permission denied", "/tmp/mleforge-ws/submissions")

    def discard(self, result):
        pass


def test_a_broken_executor_loses_the_rollout(titanic):
    reward = ExecutingReward({"titanic": titanic}, BrokenExecutor(), lambda step: {DRAFT.state_id: DRAFT},
                             reward=REWARDS)
    try:
        rollout = reward.rollout(0, 0, 0, DRAFT, completion(HOSTILE["probabilities"]), 10)
    finally:
        reward.close()
    assert rollout.outcome is None and rollout.reward is None
    assert rollout.lost == "sandbox: PermissionError: [Errno 13] Permission denied: '/tmp/mleforge-ws/submissions'"
