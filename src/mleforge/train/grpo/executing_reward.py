"""The executing reward: TRL calls it with a step's completions; it renders nothing itself.

For each completion it takes the agent's step (mleforge.agent.step.run_step: parse the
action, run the script in the sandbox, grade the submission here in the parent, reward it
with the reward module), for the whole batch at once on a pool of threads (the executor's
runs are processes; identical scripts of a group are one run with the result cache). It
returns each rollout's reward, or None for a rollout the infrastructure lost (the sandbox
failed: a SandboxError or an OSError out of the executor, or the run was cancelled), which
TRL leaves out of the group's advantages; the policy's own failures (no code, a crash, a
timeout, a bad submission) are rewards like any other. Grading is total (whatever a script
writes is a grade report; a grader's failure on it is an invalid report that names it), so
no submission raises here; any other exception is a bug of ours and propagates: it is
never turned into a score.

The rollouts stay here, per step, until the feedback callback takes them.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mleforge.agent.state import State
from mleforge.agent.step import RewardContext, StepOutcome, node_id_for, run_step
from mleforge.errors import SandboxError
from mleforge.reward import RewardConfig
from mleforge.sandbox import RunLimits
from mleforge.tasks.task import Task

if TYPE_CHECKING:
    from mleforge.sandbox import Executor
    from mleforge.train.config import TrainConfig


@dataclass(frozen=True)
class Rollout:
    """One completion of one state, executed (or lost). `index` is its position in the
    step across ranks; `group` its group."""

    step: int
    index: int
    group: int
    state: State
    completion: str
    completion_tokens: int
    outcome: StepOutcome | None  # None when lost
    lost: str | None = None  # why the infrastructure lost it

    @property
    def reward(self) -> float | None:
        return None if self.outcome is None else self.outcome.reward.total

    @property
    def rollout_id(self) -> str:
        return f"s{self.step}r{self.index}"


def completion_text(completion: Any) -> str:
    """TRL's completion: a list of chat messages (conversational) or a string."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list) and completion and isinstance(completion[-1], dict):
        return str(completion[-1].get("content") or "")
    raise TypeError(f"unexpected completion {completion!r:.80}")


class ExecutingReward:
    """A TRL reward function (async: TRL awaits it while nothing else runs).

    `states(step)` gives the step's states by id (the feed's batch); `rank` and `world`
    place this process's rows in the step.
    """

    __name__ = "mleforge"  # TRL logs rewards/<name>/mean

    def __init__(
        self,
        tasks: Mapping[str, Task],
        executor: Executor,
        states: Callable[[int], Mapping[str, State]],
        *,
        reward: RewardConfig | None = None,
        timeout_s: float | None = None,
        max_workers: int = 1,
        rank: int = 0,
        feedback: str = "public",
    ):
        self.tasks = dict(tasks)
        self.executor = executor
        self.states = states
        self.contexts = {tid: RewardContext(task, reward or RewardConfig(), feedback=feedback) for tid, task in self.tasks.items()}
        self.limits = {tid: RunLimits.of(None, task.spec.limits, timeout_s=timeout_s) for tid, task in self.tasks.items()}
        self.rank = rank
        self.feedback = feedback  # public: states offered back show public scores; none: no score at all
        self._pool = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="mleforge-reward")
        self._lock = threading.Lock()
        self._pending: dict[int, list[Rollout]] = {}
        self.exec_s: dict[int, float] = {}

    async def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], state_id: Sequence[str],
                       group: Sequence[int], trainer_state: Any = None, completion_ids: Sequence[Any] | None = None,
                       log_metric: Callable[[str, float], None] | None = None, **_: Any) -> list[float | None]:
        step = int(trainer_state.global_step) if trainer_state is not None else 0
        states = self.states(step)
        offset = self.rank * len(completions)
        loop = asyncio.get_running_loop()
        started = time.perf_counter()
        jobs = [
            loop.run_in_executor(self._pool, self.rollout, step, offset + i, int(group[i]), states[state_id[i]],
                                 completion_text(c), len(completion_ids[i]) if completion_ids is not None else 0)
            for i, c in enumerate(completions)
        ]
        rollouts = list(await asyncio.gather(*jobs))
        with self._lock:
            self._pending.setdefault(step, []).extend(rollouts)
            self.exec_s[step] = self.exec_s.get(step, 0.0) + time.perf_counter() - started
        if log_metric is not None:
            log_metric("mleforge/lost", sum(r.lost is not None for r in rollouts) / max(1, len(rollouts)))
        return [r.reward for r in rollouts]

    def rollout(self, step: int, index: int, group: int, state: State, text: str, tokens: int) -> Rollout:
        """Parse, execute, grade and reward one completion; a lost run is a Rollout without outcome."""
        task = self.tasks[state.task_id]
        node_id = node_id_for(state, text, salt=f"s{step}r{index}")
        try:
            outcome = run_step(state, text, task, self.executor, self.contexts[state.task_id],
                               limits=self.limits[state.task_id], node_id=node_id,
                               metadata={"policy_step": step, "completion_tokens": tokens})
        except SandboxError as exc:
            return Rollout(step, index, group, state, text, tokens, None, f"sandbox: {exc}")
        except OSError as exc:  # the executor broke, not the policy
            return Rollout(step, index, group, state, text, tokens, None, f"sandbox: {type(exc).__name__}: {exc}")
        if outcome.result is not None and outcome.result.killed_by == "cancelled":
            return Rollout(step, index, group, state, text, tokens, None, "the run was cancelled")
        return Rollout(step, index, group, state, text, tokens, outcome)

    def take(self, step: int) -> tuple[list[Rollout], float]:
        """This rank's rollouts of `step` (in their order) and the seconds they took; forgotten here."""
        with self._lock:
            rollouts = sorted(self._pending.pop(step, []), key=lambda r: r.index)
            return rollouts, self.exec_s.pop(step, 0.0)

    def close(self) -> None:
        self._pool.shutdown(wait=True)


def execution_workers(config: TrainConfig, tasks: Sequence[Task], share: int = 1) -> int:
    """How many of a group's runs execute at once: `exec_workers`, else what every task's
    limits allow on this machine, split among the `share` processes that train on it."""
    from mleforge.sandbox.batch import default_workers

    if config.sandbox.exec_workers is not None:
        return config.sandbox.exec_workers
    return max(1, min(default_workers(RunLimits.of(None, t.spec.limits)) for t in tasks) // share)
