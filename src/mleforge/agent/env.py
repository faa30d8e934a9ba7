"""A Gymnasium-style environment over the same pieces, for users who bring their own RL library.

    env = MLEEnv(task, executor)
    obs, info = env.reset(seed=0)                 # obs["messages"]: the prompt to answer
    obs, reward, terminated, truncated, info = env.step(completion_text)

An action is a completion (text); the observation is the next state, rendered
(`messages`) and structured (`state`). Rewards are the reward module's totals;
`info` carries the components, the node and the grade. MLE has no terminal
success, so `terminated` is always False and an episode ends by truncation
after `max_steps`. `reset(options={"state": State})` starts from any stored
state: ML-Agent's step-wise RL samples states instead of replaying episodes.
No dependency on gymnasium itself (it is not needed to follow its API).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mleforge.agent.journal import Journal
from mleforge.agent.prompt_config import PromptConfig
from mleforge.agent.prompts import render_prompt
from mleforge.agent.search import SearchConfig, next_state
from mleforge.agent.state import State
from mleforge.agent.step import RewardContext, node_id_for, run_step
from mleforge.errors import ConfigError, MleforgeError
from mleforge.reward import RewardConfig
from mleforge.sandbox import RunLimits
from mleforge.tasks.task import Task


class EnvError(MleforgeError):
    """The environment was used out of order (step before reset, step after the end)."""


class MLEEnv:
    def __init__(self, task: Task, executor: Any, *, max_steps: int = 8,
                 search: SearchConfig | None = None, prompt: PromptConfig | None = None,
                 reward: RewardConfig | None = None, run_timeout_s: float | None = None,
                 feedback: str = "public"):
        if max_steps < 1:
            raise ConfigError(f"max_steps must be >= 1; got {max_steps}")
        self.task = task
        self.executor = executor
        self.max_steps = max_steps
        self.search = search or SearchConfig()
        self.prompt = prompt or PromptConfig()
        # Public scores (or none, `feedback="none"`) in observations and rewards; never private.
        self.rewards = RewardContext(task, reward or RewardConfig(), feedback)
        self.limits = RunLimits.of(None, task.spec.limits, timeout_s=run_timeout_s)
        self._seed = 0
        self._steps = 0
        self._state: State | None = None
        self._ideas: tuple[str, ...] = ()

    @property
    def state(self) -> State | None:
        return self._state

    @property
    def journal(self) -> Journal | None:
        return None if self._state is None else self._state.journal

    def _observation(self, state: State) -> dict[str, Any]:
        return {
            "state_id": state.state_id,
            "stage": state.stage,
            "messages": render_prompt(state, self.task, self.prompt),
            "state": state.to_dict(),
        }

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[dict, dict]:
        options = dict(options or {})
        unknown = set(options) - {"state", "ideas"}
        if unknown:
            raise ConfigError(f"unknown reset option(s) {sorted(unknown)}; expected state, ideas")
        self._seed = 0 if seed is None else int(seed)
        self._steps = 0
        self._ideas = tuple(options.get("ideas", ()))
        state = options.get("state")
        if state is None:
            journal = Journal(self.task.id, self.task.spec.direction)
            state = next_state(journal, self.search, np.random.default_rng([self._seed, 0]), self._ideas)
        elif not isinstance(state, State) or state.task_id != self.task.id:
            raise ConfigError(f"options['state'] must be a State of task {self.task.id}")
        self._state = state
        return self._observation(state), {"task_id": self.task.id, "max_steps": self.max_steps}

    def step(self, action: str | bytes) -> tuple[dict, float, bool, bool, dict]:
        if self._state is None:
            raise EnvError("call reset() before step()")
        if self._steps >= self.max_steps:
            raise EnvError(f"the episode ended after {self.max_steps} steps; call reset()")
        state = self._state
        text = action.decode("utf-8", "replace") if isinstance(action, bytes) else str(action)
        outcome = run_step(state, text, self.task, self.executor, self.rewards, limits=self.limits,
                           node_id=node_id_for(state, text, salt=f"env-seed={self._seed}"))
        self._steps += 1
        journal = state.journal.add(outcome.node)
        rng = np.random.default_rng([self._seed, len(journal)])
        self._state = next_state(journal, self.search, rng, self._ideas)
        truncated = self._steps >= self.max_steps
        info = {
            "outcome": outcome.node.outcome,
            "reward_components": outcome.reward.to_dict(),
            "node": outcome.node.to_dict(),
            "score": outcome.node.score,
            "report": None if outcome.report is None else outcome.report.to_dict(),
            "next_state": State.after(journal, outcome.node),
        }
        return self._observation(self._state), float(outcome.reward.total), False, truncated, info

    def close(self) -> None:
        self._state = None


def check_env(env: MLEEnv, valid_action: str, seed: int = 0) -> list[str]:
    """Conformance: the API's shapes, determinism of reset, rewards of a format error and of
    a valid action, truncation, and errors out of order. Returns the problems (empty = ok)."""
    problems: list[str] = []

    def expect(condition: bool, message: str) -> None:
        if not condition:
            problems.append(message)

    obs, info = env.reset(seed=seed)
    expect(isinstance(obs, dict) and isinstance(info, dict), "reset must return (dict, dict)")
    expect(set(obs) == {"state_id", "stage", "messages", "state"}, f"observation keys {sorted(obs)}")
    expect(obs["stage"] == "draft", "an episode starts with a draft")
    expect(all(m.get("role") in ("system", "user") and m.get("content") for m in obs["messages"]),
           "messages must be non-empty chat messages")
    again, _ = env.reset(seed=seed)
    expect(again == obs, "reset with the same seed must give the same observation")
    expect(State.from_dict(obs["state"]).state_id == obs["state_id"], "the state must round-trip")

    result = env.step("no code here, only words")
    expect(len(result) == 5, "step must return 5 values")
    _, reward, terminated, truncated, info = result
    expect(info["outcome"] == "format_error" and reward == env.rewards.config.r_format,
           f"a format error must earn r_format; got {info['outcome']} {reward}")
    expect(terminated is False, "terminated is always False")

    obs, reward, _, truncated, info = env.step(valid_action)
    expect(info["outcome"] == "valid", f"the valid action was {info['outcome']}: {info['node']['error']}")
    expect(isinstance(reward, float) and reward >= 0.5, f"a valid draft earns at least 0.5; got {reward}")
    expect(info["next_state"] is not None and info["next_state"].stage == "improve",
           "a valid node must offer an improve state")

    while not truncated:
        _, _, _, truncated, _ = env.step("still no code")
    try:
        env.step("one too many")
        problems.append("step after truncation must raise")
    except EnvError:
        pass
    env.close()
    try:
        env.step("after close")
        problems.append("step after close must raise")
    except EnvError:
        pass
    return problems
