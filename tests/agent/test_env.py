"""The Gymnasium-style environment, and its conformance check over every built-in task."""

from __future__ import annotations

import pytest

from mleforge.agent.env import EnvError, MLEEnv, check_env
from mleforge.agent.state import State
from mleforge.sandbox import make_executor
from mleforge.tasks.registry import BUILTIN_DIR
from tests.agent.scripted import COPY_SAMPLE, CRASH

BUILTIN_IDS = sorted(p.name for p in BUILTIN_DIR.iterdir() if (p / "task.yaml").is_file())


@pytest.fixture(scope="module")
def executor():
    with make_executor("local") as ex:
        yield ex


@pytest.mark.parametrize("task_id", BUILTIN_IDS)
def test_conformance_on_every_builtin_task(task_id, prepared_registry, executor):
    env = MLEEnv(prepared_registry.get(task_id), executor, max_steps=4)
    assert check_env(env, COPY_SAMPLE) == []


def test_reward_and_next_states(prepared_registry, executor):
    env = MLEEnv(prepared_registry.get("titanic"), executor, max_steps=3)
    with pytest.raises(EnvError, match="reset"):
        env.step(COPY_SAMPLE)
    obs, _ = env.reset(seed=1, options={"ideas": ["use gradient boosting"]})
    assert "use gradient boosting" in obs["messages"][-1]["content"]
    _, reward, _, _, info = env.step(CRASH)
    assert info["outcome"] == "execution_error" and reward == -0.2  # r_fail
    assert "boom" in info["node"]["execution"]["stderr"]
    assert info["next_state"].stage == "debug"
    _, reward, _, _, info = env.step(COPY_SAMPLE)
    # The sample submission scores exactly the baseline: no change earns 0.5.
    assert info["outcome"] == "valid" and reward == 0.5


def test_reset_from_a_stored_state(prepared_registry, executor):
    env = MLEEnv(prepared_registry.get("titanic"), executor, max_steps=2)
    env.reset(seed=0)
    _, _, _, _, info = env.step(COPY_SAMPLE)
    stored: State = info["next_state"]
    obs, _ = env.reset(options={"state": stored})
    assert obs["stage"] == "improve" and obs["state_id"] == stored.state_id
    _, reward, _, _, info = env.step(COPY_SAMPLE.replace("rows", "rows again"))
    assert info["outcome"] == "valid" and info["reward_components"]["reference"] == info["score"]
    assert reward == 0.5
