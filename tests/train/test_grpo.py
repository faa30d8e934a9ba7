"""Step-wise GRPO: the executing reward on real sandbox runs, and TRL's real GRPO step on a tiny
model whose completions come through the generation seam (tests/train/engines.py)."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace

import pytest

pytest.importorskip("trl")

from mleforge.agent.state import State  # noqa: E402
from mleforge.curriculum.buffer import StateBuffer  # noqa: E402
from mleforge.errors import SandboxError  # noqa: E402
from mleforge.reward import RewardConfig  # noqa: E402
from mleforge.sandbox import make_executor  # noqa: E402
from mleforge.train.config import ModelConfig, TrainConfig  # noqa: E402
from mleforge.train.grpo.executing_reward import ExecutingReward  # noqa: E402
from mleforge.train.recipe import train  # noqa: E402
from mleforge.train.records import StepMetrics  # noqa: E402
from tests.agent.scripted import COPY_SAMPLE, CRASH  # noqa: E402
from tests.train import engines  # noqa: E402  (registers the test engines)

REWARDS = RewardConfig(r_format=-0.1, r_fail=0.0, r_invalid=0.0)
DRAFT = State.draft("titanic", direction="higher")


def as_completions(texts):
    return [[{"role": "assistant", "content": t}] for t in texts]


def score(reward, texts, step=0):
    return asyncio.run(reward(
        prompts=[[{"role": "user", "content": "?"}]] * len(texts), completions=as_completions(texts),
        state_id=[DRAFT.state_id] * len(texts), group=[0] * len(texts),
        trainer_state=SimpleNamespace(global_step=step), completion_ids=[[1, 2, 3]] * len(texts)))


def test_the_reward_runs_each_completion_in_the_sandbox_and_grades_it(titanic):
    with make_executor("local") as executor:
        reward = ExecutingReward({"titanic": titanic}, executor, lambda step: {DRAFT.state_id: DRAFT},
                                 reward=REWARDS, max_workers=2)
        try:
            # a valid submission equal to the baseline (the sample's score): sigmoid(0) = 0.5;
            # a crash: r_fail; no code: r_format
            assert score(reward, [COPY_SAMPLE, CRASH, "no code here"]) == [0.5, 0.0, -0.1]
            rollouts, seconds = reward.take(0)
        finally:
            reward.close()
    assert [r.outcome.node.outcome for r in rollouts] == ["valid", "execution_error", "format_error"]
    assert [r.rollout_id for r in rollouts] == ["s0r0", "s0r1", "s0r2"] and seconds > 0
    assert rollouts[0].outcome.report.valid_submission and rollouts[0].outcome.result.returncode == 0
    assert "boom" in rollouts[1].outcome.result.stderr and rollouts[2].outcome.result is None
    assert reward.take(0) == ([], 0.0)  # taken once


class FailingExecutor:
    """A real executor whose sandbox fails (SandboxError) for scripts holding a marker."""

    def __init__(self, inner):
        self.inner = inner

    def run(self, script, task, limits=None, **kw):
        if "LOSE ME" in script:
            raise SandboxError("the zygote died")
        return self.inner.run(script, task, limits, **kw)

    def discard(self, result):
        self.inner.discard(result)


def test_a_rollout_the_infrastructure_lost_earns_none_not_zero(titanic):
    lost = COPY_SAMPLE.replace("import pandas as pd", "import pandas as pd  # LOSE ME")
    with make_executor("local") as executor:
        reward = ExecutingReward({"titanic": titanic}, FailingExecutor(executor),
                                 lambda step: {DRAFT.state_id: DRAFT}, reward=REWARDS)
        try:
            assert score(reward, [lost, COPY_SAMPLE, CRASH]) == [None, 0.5, 0.0]
            rollouts, _ = reward.take(0)
        finally:
            reward.close()
    assert rollouts[0].outcome is None and rollouts[0].lost == "sandbox: the zygote died"


def test_one_grpo_step_trains_the_adapter_and_grows_the_buffer(tiny, titanic, journals, tmp_path, registry):
    from safetensors.torch import load_file

    config = TrainConfig(
        model=ModelConfig(spec=f"hf:{tiny}", gradient_checkpointing=False), tasks="titanic", eval_tasks="",
        steps=1, group_size=4, groups_per_step=1, micro_batch=2, max_new_tokens=64, warm_start="none",
        journals=str(journals), sandbox={"executor": "local"}, generation={"backend": "scripted-test"},
        stepwise={"enabled": False}, lr=1e-2,
        reward=REWARDS, seed=3,
    )
    result = train(config, tmp_path / "run", registry=registry, progress=False)
    assert result.steps == 1
    run = tmp_path / "run"
    # the 4 completions of the group earn different rewards, so the advantages are not zero
    # and the LoRA weights move off their zero init
    lines = [json.loads(x) for x in (run / "rollouts" / "step-0.jsonl").read_text().splitlines()]
    assert [x["completion"] for x in lines] == list(engines.COMPLETIONS)
    assert len({x["reward"] for x in lines}) > 1
    weights = load_file(run / "final" / "adapter_model.safetensors")
    lora_b = [w for name, w in weights.items() if "lora_B" in name]
    assert lora_b and any(float(w.abs().max()) > 0 for w in lora_b)
    # the buffer: 2 seeds (the journal's debug and improve states: the seed stages leave the
    # task's empty draft out);
    # the sampled state's statistics counted the group, and the runs that ran became states
    buffer = StateBuffer(run, create=False)
    rows = {r["state_id"]: r for r in buffer.rows()}
    sampled = lines[0]["state_id"]
    assert rows[sampled]["rollouts"] == 4
    ran = [x for x in lines if x["outcome"] != "format_error"]
    (metrics,) = [StepMetrics.from_dict(json.loads(x)) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert buffer.counts()["seeds"] == 2 and metrics.states_added >= 1
    assert buffer.counts()["live_states"] == 2 + metrics.states_added <= 2 + len(ran)
    assert metrics.reward_mean == pytest.approx(sum(x["reward"] for x in lines) / 4)
    assert metrics.valid_rate + metrics.format_error_rate + metrics.exec_error_rate + metrics.timeout_rate \
        + metrics.invalid_submission_rate + metrics.lost_rate == pytest.approx(1.0)
    assert metrics.frac_zero_std_groups == 0.0 and metrics.buffer_size == buffer.counts()["live_states"]
    buffer.close()


def test_training_close_releases_the_rollout_engine_when_the_reward_close_fails():
    from mleforge.train.grpo.training import Training

    closed = []

    class Part:
        def __init__(self, name, fails=False):
            self.name, self.fails = name, fails

        def close(self):
            closed.append(self.name)
            if self.fails:
                raise OSError(f"{self.name} failed to close")

    training = Training(trainer=None, reward=Part("reward", fails=True), feed=None, progress=Part("progress"),
                        full=False, base_spec="bundled:x", rollout=Part("rollout"))
    with pytest.raises(OSError, match="reward failed to close"):
        training.close()
    assert closed == ["progress", "reward", "rollout"]


def test_auto_executor_stops_the_pool_on_any_error(monkeypatch):
    from mleforge.sandbox import make_executor

    stopped = []

    class Pool:
        def resolve_isolation(self):
            raise KeyboardInterrupt

        def close(self):
            stopped.append(True)

    monkeypatch.setattr("mleforge.sandbox.pool.executor.PoolExecutor", lambda **options: Pool())
    with pytest.raises(KeyboardInterrupt):
        make_executor("auto")
    assert stopped == [True]
