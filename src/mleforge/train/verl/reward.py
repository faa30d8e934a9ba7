"""verl's custom reward function: a completion for a state, executed, graded and rewarded.

Configure it in verl as

    reward.custom_reward_function.path=pkg://mleforge.train.verl.reward
    reward.custom_reward_function.name=compute_score

verl's reward managers (verl/experimental/reward_loop/reward_manager/naive.py, 0.9.1) call
`compute_score(data_source=, solution_str=, ground_truth=, extra_info=)`, awaiting it when
it is a coroutine function (this one is: the run happens on a thread pool, the event loop
keeps scoring the rest of the batch), and read the result: a dict's `score` is the reward,
and every key of it goes into `reward_extra_info`, which verl logs and which
`algorithm.filter_groups.metric` may name. verl builds one array per key from the first
result's keys, so every result here has the same keys, all numbers.

The score is the one `mleforge train` gives: `mleforge.agent.step.run_step` (parse, run in
the sandbox, grade here in the parent on the public answers, the reward module), with the
run's executor, reward and feedback settings. The policy's own failures (no code block, a
crash, a timeout, a bad submission) are rewards like any other.

Infrastructure failures are not. When the sandbox itself fails (a SandboxError or an OSError
out of the executor, or a cancelled run) the rollout is retried once, and if it fails again
`compute_score` raises RolloutLost. What verl does with that (read in its source): it does
not score a None (`torch.tensor([None])` fails) and has no per-sample "missing reward"; an
exception fails the rollout's session, and verl's V1 trainer (`trainer.use_v1`, the
default) marks the whole group failed, and evicts and refills it where
`trainer.v1.sampler.sync_refill_failed_groups=true` (synchronous mode; our examples set it)
or in its asynchronous modes: the group is left out of the step, never scored as zero. Any
other exception is a bug of ours and propagates.
"""

from __future__ import annotations

import asyncio
import atexit
import socket
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from mleforge.agent.execution import ExecutionSummary
from mleforge.agent.state import State
from mleforge.agent.step import RewardContext, StepOutcome, node_id_for, run_step
from mleforge.errors import SandboxError
from mleforge.reward import CASES
from mleforge.runs import RESULTS_CACHE
from mleforge.sandbox import RunLimits
from mleforge.train.errors import TrainError
from mleforge.train.verl.owner import RolloutReport, find_owner
from mleforge.train.verl.rows import DATA_SOURCE, state_of
from mleforge.train.verl.run import VerlRun

RETRIES = 1  # a lost run is tried again this many times before the group is given up
KEYS = ("score", *CASES, "cached", "exec_s")  # what every result holds, in this order


class RolloutLost(TrainError):
    """The infrastructure lost a rollout (the sandbox failed, not the policy's script)."""


class Scorer:
    """One process's scorer of a run: its tasks, executor and reward settings."""

    def __init__(self, run: VerlRun, executor: Any = None, workers: int | None = None):
        from mleforge.tasks.preparation import prepare
        from mleforge.train.grpo.executing_reward import execution_workers

        config = run.config
        self.run = run
        for task in run.tasks.values():
            prepare(task)  # on each node: deterministic, and nothing to do where it is prepared
        self.executor = executor if executor is not None else run_executor(run)
        self.contexts = {tid: RewardContext(t, config.reward, feedback=config.feedback) for tid, t in run.tasks.items()}
        self.limits = {tid: RunLimits.of(None, t.spec.limits, timeout_s=config.sandbox.run_timeout_s)
                       for tid, t in run.tasks.items()}
        self.pool = ThreadPoolExecutor(max_workers=workers or execution_workers(config, list(run.tasks.values())),
                                       thread_name_prefix="mleforge-verl-reward")

    def score(self, state: State, completion: str, salt: str) -> StepOutcome:
        """Run one completion; RolloutLost when the infrastructure fails twice."""
        node_id = node_id_for(state, completion, salt=salt)
        task = self.run.task(state.task_id)
        lost = ""
        for _ in range(1 + RETRIES):
            try:
                outcome = run_step(state, completion, task, self.executor, self.contexts[task.id],
                                   limits=self.limits[task.id], node_id=node_id, metadata={"rollout_id": salt})
            except (SandboxError, OSError) as exc:  # the executor broke, not the policy
                lost = f"{type(exc).__name__}: {exc}"
                continue
            if outcome.result is not None and outcome.result.killed_by == "cancelled":
                lost = "the run was cancelled"
                continue
            return outcome
        raise RolloutLost(f"the sandbox lost rollout {salt} of state {state.state_id} ({lost}); verl leaves its "
                          "group out of the step")

    def close(self) -> None:
        self.pool.shutdown(wait=True)
        self.executor.close()


def run_executor(run: VerlRun) -> Any:
    """The run's executor (`sandbox` section), with a result cache per host: the processes
    of one node share it (SQLite in WAL mode), nodes do not (WAL needs one host's memory)."""
    from mleforge.sandbox import CachingExecutor, make_executor

    sandbox = run.config.sandbox
    options: dict[str, Any] = {}
    if sandbox.exec_workers is not None and sandbox.executor != "ray":
        options["max_workers"] = sandbox.exec_workers
    if sandbox.isolation is not None:
        options["isolation"] = sandbox.isolation
    executor = make_executor(sandbox.executor, **options)
    if not sandbox.cache:
        return executor
    cache = Path(run.folder) / f"{Path(RESULTS_CACHE).stem}-{socket.gethostname()}.sqlite"
    return CachingExecutor(executor, cache)


# verl calls compute_score once per rollout, in a process that scores for the whole run: a
# run's scorer (its thread pool, executor and result cache) lives as long as that process, and
# is closed when it exits (close_scorers), so that its sandbox session and the folder of its
# cache hits go with it. A run folder's config never changes (prepare_run refuses another).
_scorers: dict[str, Scorer] = {}
_scorers_lock = threading.Lock()
_close_at_exit = False


def scorer_for(folder: str) -> Scorer:
    """This process's scorer of the run in `folder`, made on first use, closed at exit."""
    global _close_at_exit
    key = str(Path(folder).resolve())  # one scorer per run, however its folder is spelled
    with _scorers_lock:
        if key not in _scorers:
            _scorers[key] = Scorer(VerlRun.load(key))
            if not _close_at_exit:
                atexit.register(close_scorers)
                _close_at_exit = True
        return _scorers[key]


def close_scorers() -> None:
    """Close this process's scorers (at its exit; a later scorer_for makes new ones)."""
    with _scorers_lock:
        scorers = list(_scorers.values())
        _scorers.clear()
    errors = []
    for scorer in scorers:
        try:
            scorer.close()
        except Exception as exc:  # the others are closed all the same
            errors.append(exc)
    if errors:
        raise errors[0]


def result_of(outcome: StepOutcome) -> dict[str, float]:
    """The dict verl receives: the reward as `score`, one 0/1 per reward case, whether the
    run came from the result cache, and its seconds."""
    result = outcome.result
    out = {"score": float(outcome.reward.total)}
    out.update({case: float(outcome.reward.case == case) for case in CASES})
    out["cached"] = float(bool(result is not None and result.cached))
    out["exec_s"] = float(result.wall_s) if result is not None else 0.0
    return out


async def compute_score(data_source: str, solution_str: str, ground_truth: Any, extra_info: dict | None = None,
                        mleforge_run: str | None = None, **_: Any) -> dict[str, float]:
    """The reward of `solution_str` for the state its row carries (see the module docstring).

    `mleforge_run` (through `reward.custom_reward_function.reward_kwargs`) overrides the run
    directory the row names. Rows of other data sources are refused: mix datasets with a
    reward function of your own that calls this one for `data_source == "mleforge"`."""
    if data_source != DATA_SOURCE:
        raise TrainError(f"mleforge's compute_score scores rows of data_source {DATA_SOURCE!r}, not {data_source!r}")
    state = state_of(extra_info, ground_truth)
    folder = mleforge_run or (extra_info or {}).get("run")
    if not folder:
        raise TrainError("the row names no run directory (extra_info.run); pass "
                         "+reward.custom_reward_function.reward_kwargs.mleforge_run=RUN_DIR")
    scorer = scorer_for(str(folder))
    # The node id hashes (state, salt, completion): the same completion of the same draw is the
    # same node, so identical rollouts of a group offer the buffer one next state, not copies.
    salt = f"v{extra_info.get('index', 0)}"
    loop = asyncio.get_running_loop()
    outcome = await loop.run_in_executor(scorer.pool, scorer.score, state, solution_str, salt)
    owner = extra_info.get("owner")
    if owner:
        summary = None if outcome.result is None else ExecutionSummary.from_result(
            outcome.result, max_chars=scorer.run.config.buffer.output_max_chars)
        report = RolloutReport(state, solution_str, summary, outcome.reward, outcome.node.id, outcome.node.error)
        await find_owner(owner).report.remote(report)
    return result_of(outcome)
