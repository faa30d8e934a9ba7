"""Step-wise evaluation (ML-Agent's unit): k sampled completions for each of a fixed set of states.

    draw = draw_states(tasks, n_states=24, seed=0, work_dir="runs/eval-stepwise/x/expert")
    result = run_stepwise(policy, draw.states, tasks, executor, sampling=SamplingConfig(temperature=0.7),
                          seeds=(0, 1, 2, 3), draw=draw.to_dict())
    result.metrics            # the headline: states with headroom only
    result.no_headroom        # the states at the top already, apart

The states come from expert journals of the given tasks (`journals=`, or made on the fly by
the template expert with `mleforge collect` into `work_dir`, where later calls find them):
every state along every journal, deduplicated, drawn with a seed, task by task in turn so
that each task is represented. States without headroom (mleforge.eval.headroom: the score the
reward compares with is already the metric's perfect value) are dropped from the draw by
default (`headroom="require"`; "prefer" fills up with them, "any" ignores headroom); the draw
says how many were dropped. Each state gets one completion per sampling seed (`seeds`; the
seed is part of the result, so that a second policy is evaluated on the very same (state,
seed) pairs: mleforge.eval.stepwise_compare pairs them), executed, graded and rewarded
exactly as a GRPO rollout is (`agent.step.run_step` with the task's `RewardContext`). A
completion depends on its seed and on the batch it was generated in (the policy derives one
seed per call from it), so a rerun with the same settings repeats it.

Per completion (a record, one per (state, seed)):
- format_error_rate: no parsable action; valid_rate: the run wrote a valid submission;
- mean_reward: the reward module's total;
- improve_rate: improve states only, a valid run that beat the state's best score;
- score_gain: max(0, delta), the reward's delta (score minus the state's reference, in units
  of the task's spread, signed so that positive is better, clipped as the reward clips it);
  0 for a run with no valid submission.
Each metric is averaged over a state's seeds first, then over states: the figure is the mean
of the state means with its standard error over states (sample std with ddof=1 over sqrt(n),
as `eval.aggregate.mean_sem`; None for n = 1), the STATE being the unit. `metrics` are over
the states with headroom (or unknown headroom); `no_headroom` gives the others' count, ids
and figures apart; `by_stage` splits the headline's states by stage.

A folder written by `cmd_eval_stepwise` (cli/stepwise.py) holds run.json (kind "stepwise",
policy, tasks, the contamination check) and stepwise.json (`StepwiseResult.to_dict()`);
`mleforge report` renders it (mleforge.eval.stepwise_report).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from rich.console import Console

from mleforge.agent.journal import Journal
from mleforge.agent.prompt_config import PromptConfig
from mleforge.agent.prompts import render_prompt
from mleforge.agent.state import State
from mleforge.agent.step import RewardContext, node_id_for, run_step
from mleforge.errors import ConfigError
from mleforge.eval.aggregate import mean_sem
from mleforge.eval.stepwise_config import HEADROOM_CHOICES
from mleforge.tasks.task import Task

if TYPE_CHECKING:
    from mleforge.policies import Policy, SamplingConfig
    from mleforge.reward import RewardConfig
    from mleforge.sandbox import Executor
    from mleforge.tasks.registry import TaskRegistry

RESULT_FILE = "stepwise.json"
RESULT_FORMAT = 2  # 2: records per (state, seed), headroom on every state, the draw; 1 (no key): one per state
# (key, label, scale of the shown number): the figures of a result, in the order tables show them
METRICS = (("mean_reward", "mean reward", 1.0), ("valid_rate", "valid %", 100.0),
           ("format_error_rate", "format errors %", 100.0),
           ("improve_rate", "improved on best % (improve states)", 100.0),
           ("score_gain", "score gain (task spreads, >= 0)", 1.0))
DEFAULT_SAMPLES = 4  # k: completions per state, one per sampling seed


def sample_seeds(first: int, k: int) -> tuple[int, ...]:
    """The sampling seeds of k completions per state: first, first + 1, ..., first + k - 1."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ConfigError(f"samples (k) must be an integer >= 1; got {k!r}")
    return tuple(range(first, first + k))


# --- the states ------------------------------------------------------------------------------------


def _journal_states(journal: Journal) -> list[State]:
    from mleforge.curriculum.seeds import journal_states

    return journal_states(journal)


def collected_journals(tasks: Sequence[Task], work_dir: str | Path, *, registry: TaskRegistry | None = None,
                       episodes: int = 1, steps: int = 6, executor: Executor | None = None, progress: bool = False,
                       console: Console | None = None) -> list[Journal]:
    """Template-expert journals of `tasks`, made (or resumed, or found) in `work_dir` by collect."""
    from mleforge.expert.collect import CollectConfig, collect_samples
    from mleforge.expert.episodes import load_journals

    if registry is None:
        from mleforge.tasks.registry import TaskRegistry

        registry = TaskRegistry()
    config = CollectConfig(tasks=",".join(t.id for t in tasks), episodes=episodes, steps=steps, embedder="tfidf")
    result = collect_samples(config, work_dir, registry=registry, executor=executor, progress=progress,
                             console=console)
    return load_journals(result.journals_dir)


@dataclass(frozen=True)
class StateDraw:
    """The states drawn, and what the draw left out: `candidates` states were eligible (of the
    stages asked for), `dropped` are (state_id, task_id, reason) of those left out for want of
    headroom ("require"), `filled` how many states without headroom filled up a "prefer" draw."""

    states: tuple[State, ...]
    candidates: int
    headroom: str
    dropped: tuple[tuple[str, str, str], ...] = ()
    filled: int = 0

    def to_dict(self) -> dict[str, Any]:
        from mleforge.eval.headroom import RULE

        return {"candidates": self.candidates, "drawn": len(self.states), "headroom": self.headroom,
                "rule": RULE, "dropped_no_headroom": len(self.dropped),
                "dropped": [list(d) for d in self.dropped], "filled_no_headroom": self.filled}


def _baselines(tasks: Sequence[Task], reward_config: RewardConfig | None) -> Callable[[str], float | None]:
    """A task id -> its baseline (RewardContext.baseline), computed once per task on first use;
    None for a task with no known top (its headroom is unknown whatever the baseline)."""
    from mleforge.eval.headroom import perfect_score
    from mleforge.reward import RewardConfig

    by_id, cache = {t.id: t for t in tasks}, {}

    def baseline(task_id: str) -> float | None:
        if task_id not in cache:
            task = by_id[task_id]
            cache[task_id] = (None if perfect_score(task) is None
                              else RewardContext(task, reward_config or RewardConfig()).baseline)
        return cache[task_id]

    return baseline


def _load_records(tasks: Sequence[Task], journals: str | Path | Sequence[Journal] | None,
                  work_dir: str | Path | None, **collect: Any) -> list[Journal]:
    if journals is None:
        if work_dir is None:
            raise ConfigError("give journals (a folder or records) or a work_dir to make them in")
        return collected_journals(tasks, work_dir, **collect)
    if isinstance(journals, (str, Path)):
        from mleforge.expert.episodes import load_journals

        return load_journals(journals)
    return list(journals)


def draw_states(tasks: Sequence[Task], *, n_states: int, seed: int,
                journals: str | Path | Sequence[Journal] | None = None,
                work_dir: str | Path | None = None, stages: Sequence[str] = ("draft", "debug", "improve"),
                headroom: str = "require", registry: TaskRegistry | None = None, episodes: int = 1,
                steps: int = 6, executor: Executor | None = None, progress: bool = False,
                console: Console | None = None, reward_config: RewardConfig | None = None) -> StateDraw:
    """A fixed, seeded set of at most `n_states` states along expert journals of `tasks`.

    `journals`: a folder (of `mleforge collect` or `mleforge eval` output) or Journal records;
    None makes them with the template expert in `work_dir`. Candidates are every state along
    every journal of the tasks whose stage is in `stages`, deduplicated by id and sorted by
    id; each task's are shuffled with `seed` and the tasks take turns (in the given order).
    `headroom`: "require" drops the states without headroom (mleforge.eval.headroom) before
    the draw, "prefer" draws them only once the others run out, "any" ignores headroom."""
    if isinstance(n_states, bool) or not isinstance(n_states, int) or n_states < 1:
        raise ConfigError(f"n_states must be an integer >= 1; got {n_states!r}")
    if headroom not in HEADROOM_CHOICES:
        raise ConfigError(f"headroom must be one of {', '.join(HEADROOM_CHOICES)}; got {headroom!r}")
    if not tasks:
        raise ConfigError("stepwise evaluation needs at least one task")
    records = _load_records(tasks, journals, work_dir, registry=registry, episodes=episodes, steps=steps,
                            executor=executor, progress=progress, console=console)
    ids = [t.id for t in tasks]
    by_task = _candidates(ids, records, stages)
    baseline, by_id = _baselines(tasks, reward_config), {t.id: t for t in tasks}
    rng = np.random.default_rng(seed)
    queues, flat = [], []  # per task, shuffled: states with headroom (or unknown), states without
    for task_id in ids:
        pool = [by_task[task_id][k] for k in sorted(by_task[task_id])]
        shuffled = [pool[i] for i in rng.permutation(len(pool))]
        room = [headroom == "any" or _room(s, by_id[task_id], baseline) for s in shuffled]
        queues.append([s for s, r in zip(shuffled, room) if r])
        flat.append([s for s, r in zip(shuffled, room) if not r])
    candidates = sum(len(q) + len(f) for q, f in zip(queues, flat))
    chosen = _take_turns(queues, n_states)
    dropped: list[tuple[str, str, str]] = []
    filled = 0
    if headroom == "prefer" and len(chosen) < n_states:
        more = _take_turns(flat, n_states - len(chosen))
        chosen, filled = chosen + more, len(more)
    elif headroom == "require":
        dropped = [(s.state_id, s.task_id, "its reference score is the metric's perfect value") for f in flat for s in f]
    if not chosen:
        raise ConfigError(f"none of the {candidates} {'/'.join(stages)} states of {', '.join(ids)} has headroom "
                          "(every one's reference score is the metric's perfect value); evaluate on tasks where "
                          "scores can improve, or draw with headroom 'prefer' or 'any'")
    return StateDraw(tuple(chosen), candidates, headroom, tuple(dropped), filled)


def _candidates(ids: Sequence[str], records: Sequence[Journal], stages: Sequence[str]) -> dict[str, dict[str, State]]:
    """{task id: {state id: state}} of every state along the journals of the tasks `ids` whose
    stage is in `stages`; refused when there is none."""
    by_task: dict[str, dict[str, State]] = {t: {} for t in ids}
    for journal in records:
        if journal.task_id in by_task:
            for state in _journal_states(journal):
                if state.stage in stages:
                    by_task[journal.task_id].setdefault(state.state_id, state)
    if not any(by_task.values()):
        raise ConfigError(f"no {'/'.join(stages)} states in the journals of {', '.join(ids)}; "
                          "collect expert journals of these tasks first (mleforge collect)")
    return by_task


def same_states(tasks: Sequence[Task], state_ids: Sequence[str], *,
                journals: str | Path | Sequence[Journal]) -> StateDraw:
    """The states `state_ids`, in that order, from `journals`: an earlier evaluation's draw, for
    another policy to be evaluated on the very same states (whatever their headroom)."""
    by_task = _candidates([t.id for t in tasks], _load_records(tasks, journals, None), ("draft", "debug", "improve"))
    found = {sid: state for states in by_task.values() for sid, state in states.items()}
    missing = [sid for sid in state_ids if sid not in found]
    if missing:
        raise ConfigError(f"{len(missing)} of the {len(state_ids)} states (e.g. {missing[0][:12]}) are not in the "
                          f"journals {journals if isinstance(journals, (str, Path)) else '(records)'} of "
                          f"{', '.join(t.id for t in tasks)}; give the journals and tasks the first evaluation used")
    return StateDraw(tuple(found[sid] for sid in state_ids), len(found), "given")


def _room(state: State, task: Task, baseline: Callable[[str], float | None]) -> bool:
    """Whether `state` has headroom or unknown headroom; the task's baseline is computed only
    where the reference is the baseline (not an improve state's best)."""
    from mleforge.eval.headroom import state_headroom

    own = state.stage == "improve" and state.journal.best_score is not None
    return state_headroom(state, task, None if own else baseline(task.id)) is not False


def _take_turns(queues: list[list[State]], n: int) -> list[State]:
    """Up to n states, one from each queue in turn (the queues are consumed)."""
    chosen: list[State] = []
    while len(chosen) < n and any(queues):
        for queue in queues:
            if queue and len(chosen) < n:
                chosen.append(queue.pop(0))
    return chosen


def stepwise_states(tasks: Sequence[Task], *, n_states: int, seed: int, **options: Any) -> list[State]:
    """draw_states(...).states, with headroom "any" unless given (the draw of format 1)."""
    options.setdefault("headroom", "any")
    return list(draw_states(tasks, n_states=n_states, seed=seed, **options).states)


# --- the records -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class StepwiseRecord:
    """One (state, seed)'s completion and what became of it."""

    state_id: str
    task_id: str
    stage: str
    outcome: str  # a reward case: format_error, execution_error, timeout, invalid_submission, valid
    reward: float
    score: float | None
    best_before: float | None  # the state's best valid score
    improved: bool | None  # improve states: a valid run that beat best_before
    error: str | None
    completion_tokens: int
    headroom: bool | None = None  # mleforge.eval.headroom; None: unknown (counts as headroom)
    seed: int | None = None  # the sampling seed of this completion
    reference: float | None = None  # the score the reward compared a valid run with
    delta: float | None = None  # valid runs: the reward's delta, clipped as the reward clips it

    @property
    def format_error(self) -> bool:
        return self.outcome == "format_error"

    @property
    def valid(self) -> bool:
        return self.outcome == "valid"

    def value(self, metric: str) -> float | None:
        """This completion's value of a METRICS key; None where it does not apply (improve_rate
        off improve states; score_gain of a valid run in a result written before delta was)."""
        if metric == "mean_reward":
            return self.reward
        if metric == "valid_rate":
            return float(self.valid)
        if metric == "format_error_rate":
            return float(self.format_error)
        if metric == "improve_rate":
            return float(bool(self.improved)) if self.stage == "improve" else None
        if metric == "score_gain":
            if not self.valid:
                return 0.0
            return None if self.delta is None else max(0.0, self.delta)
        raise KeyError(metric)

    def to_dict(self) -> dict[str, Any]:
        return {"state_id": self.state_id, "task_id": self.task_id, "stage": self.stage, "seed": self.seed,
                "outcome": self.outcome, "reward": self.reward, "score": self.score, "best_before": self.best_before,
                "reference": self.reference, "delta": self.delta, "improved": self.improved, "error": self.error,
                "completion_tokens": self.completion_tokens, "headroom": self.headroom}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StepwiseRecord:
        return cls(**{k: data[k] for k in ("state_id", "task_id", "stage", "outcome", "reward", "score",
                                            "best_before", "improved", "error", "completion_tokens")},
                   # absent in results written before they existed
                   headroom=data.get("headroom"), seed=data.get("seed"), reference=data.get("reference"),
                   delta=data.get("delta"))


def state_values(records: Sequence[StepwiseRecord], metric: str) -> dict[str, list[float]]:
    """{state_id: the metric's values over that state's seeds}, states with no value left out:
    the input of mleforge.eval.paired."""
    out: dict[str, list[float]] = {}
    for record in records:
        value = record.value(metric)
        if value is not None:
            out.setdefault(record.state_id, []).append(value)
    return out


def stepwise_metrics(records: Sequence[StepwiseRecord]) -> dict[str, dict[str, Any]]:
    """Each metric as {"mean", "sem", "n"} with the state as the unit: the mean over a state's
    seeds first, then mean and SEM over states (n: states)."""
    out = {}
    for key, _, _ in METRICS:
        by_state = state_values(records, key)
        out[key] = mean_sem([math.fsum(v) / len(v) for v in by_state.values()])
    return out


@dataclass(frozen=True)
class StepwiseResult:
    policy: str
    tasks: tuple[str, ...]
    sampling: dict[str, Any]
    prompt_profile: str
    records: tuple[StepwiseRecord, ...]
    contamination: dict[str, Any] = field(default_factory=dict)
    timing: dict[str, float] = field(default_factory=dict)  # gen_s, exec_s: wall seconds of each phase
    seeds: tuple[int, ...] = ()  # the sampling seeds; every state has one record per seed
    draw: dict[str, Any] = field(default_factory=dict)  # StateDraw.to_dict()

    @property
    def states(self) -> tuple[str, ...]:
        """The state ids, in the order of the draw."""
        return tuple(dict.fromkeys(r.state_id for r in self.records))

    @property
    def headline_records(self) -> tuple[StepwiseRecord, ...]:
        """The records of states with headroom (or unknown headroom): the headline's."""
        return tuple(r for r in self.records if r.headroom is not False)

    @property
    def metrics(self) -> dict[str, dict[str, Any]]:
        return stepwise_metrics(self.headline_records)

    @property
    def no_headroom(self) -> dict[str, Any]:
        """The states whose reference is the top already: how many, which, and their figures."""
        flat = [r for r in self.records if r.headroom is False]
        ids = list(dict.fromkeys(r.state_id for r in flat))
        return {"n_states": len(ids), "states": ids, "metrics": stepwise_metrics(flat)}

    @property
    def by_stage(self) -> dict[str, dict[str, dict[str, Any]]]:
        kept = self.headline_records
        stages = dict.fromkeys(r.stage for r in kept)
        return {s: stepwise_metrics([r for r in kept if r.stage == s]) for s in stages}

    def to_dict(self) -> dict[str, Any]:
        headline = {r.state_id for r in self.headline_records}
        return {"kind": "stepwise", "format": RESULT_FORMAT, "policy": self.policy, "tasks": list(self.tasks),
                "sampling": dict(self.sampling), "seeds": list(self.seeds), "k": len(self.seeds) or 1,
                "prompt_profile": self.prompt_profile, "n_states": len(self.states), "n_headroom": len(headline),
                # derived; recomputed by from_dict
                "metrics": self.metrics, "no_headroom": self.no_headroom, "by_stage": self.by_stage,
                "draw": dict(self.draw), "records": [r.to_dict() for r in self.records],
                "contamination": dict(self.contamination), "timing": dict(self.timing)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StepwiseResult:
        try:
            records = tuple(StepwiseRecord.from_dict(r) for r in data["records"])
            seeds = tuple(data.get("seeds") or ())
            sampled = data["sampling"].get("seed")
            if not seeds and isinstance(sampled, int) and all(r.seed is None for r in records):
                # Format 1: one completion per state at the sampling's own seed, which run_stepwise
                # now records as seeds (sampled,); so named, it pairs with a result made since.
                seeds, records = (sampled,), tuple(replace(r, seed=sampled) for r in records)
            return cls(policy=data["policy"], tasks=tuple(data["tasks"]), sampling=dict(data["sampling"]),
                       prompt_profile=data["prompt_profile"], records=records,
                       contamination=dict(data.get("contamination") or {}),
                       timing=dict(data.get("timing") or {}), seeds=seeds, draw=dict(data.get("draw") or {}))
        except (KeyError, TypeError, AttributeError) as exc:
            raise ConfigError(f"not a step-wise evaluation result: {exc!r}") from None


def load_result(path: str | Path) -> StepwiseResult:
    """A StepwiseResult from a stepwise.json file, a folder holding one, or a training run's
    stepwise/<label>.json; a clear error otherwise."""
    import json

    path = Path(path)
    file = path / RESULT_FILE if path.is_dir() else path
    if not file.is_file():
        raise ConfigError(f"{path}: no step-wise result there; give a stepwise.json (or the folder "
                          "`mleforge eval --stepwise` wrote, or a training run's stepwise/<label>.json)")
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise ConfigError(f"{file}: not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{file}: not a step-wise evaluation result (a JSON {type(data).__name__}, not an object)")
    if data.get("available") is False:
        raise ConfigError(f"{file}: that evaluation did not run ({data.get('reason')})")
    if data.get("kind") != "stepwise":
        what = "a comparison (mleforge eval compare's output)" if "metrics" in data and "label_a" in data else \
            f"kind {data.get('kind')!r}"
        raise ConfigError(f"{file}: not a step-wise evaluation result ({what}); give a stepwise.json (or the folder "
                          "`mleforge eval --stepwise` wrote, or a training run's stepwise/<label>.json)")
    try:
        return StepwiseResult.from_dict(data)
    except ConfigError as exc:
        raise ConfigError(f"{file}: {exc}") from None


# --- running ---------------------------------------------------------------------------------------


@contextmanager
def record_progress(title: str, total: int, enabled: bool = True,
                    console: Console | None = None) -> Iterator[Callable[[Any], None]]:
    """A rich bar on `console` (stderr by default) counting the completions that have run
    (generation comes first, so the bar waits at 0 while the elapsed time runs); yields
    run_stepwise's `on_record`."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from mleforge.utils.plain_progress import PlainTicker

    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console or Console(stderr=True), disable=not enabled) as progress:
        bar = progress.add_task(title, total=total)
        ticker = PlainTicker(progress, progress.console)  # a log: a line every few seconds
        ticker.start()
        try:
            yield lambda record: progress.advance(bar)
        finally:
            ticker.stop()


def _generate(policy: Policy, states: Sequence[State], by_id: Mapping[str, Task], prompt_config: PromptConfig,
              sampling: SamplingConfig, seeds: Sequence[int], batch_size: int) -> list[tuple[int, int, Any]]:
    """(state index, seed, completion) for every state at every seed: one pass over the states
    per seed, prompts in batches of `batch_size`."""
    from dataclasses import replace

    prompts = [render_prompt(s, by_id[s.task_id], prompt_config) for s in states]
    out = []
    for seed in seeds:
        at_seed = replace(sampling, seed=seed)
        for start in range(0, len(states), batch_size):
            batch = list(range(start, min(start + batch_size, len(states))))
            made = policy.generate([prompts[i] for i in batch], n=1, sampling=at_seed,
                                   states=[states[i] for i in batch])
            out += [(i, seed, c[0]) for i, c in zip(batch, made)]
    return out


def run_stepwise(policy: Policy, states: Sequence[State], tasks: Sequence[Task] | Mapping[str, Task],
                 executor: Executor, *, sampling: SamplingConfig, seeds: Sequence[int] | None = None,
                 prompt_config: PromptConfig | None = None, reward_config: RewardConfig | None = None,
                 policy_name: str | None = None, batch_size: int = 8, workers: int = 2,
                 run_timeout_s: float | None = None, contamination: Mapping[str, Any] | None = None,
                 draw: Mapping[str, Any] | None = None, on_record: Any = None) -> StepwiseResult:
    """One completion per state and sampling seed (`seeds`; None: sampling's own seed, k = 1),
    each run through `run_step` (`workers` at a time) and rewarded with its task's RewardContext."""
    from mleforge.eval.headroom import state_headroom, state_reference
    from mleforge.reward import RewardConfig
    from mleforge.sandbox import RunLimits

    by_id = dict(tasks) if isinstance(tasks, Mapping) else {t.id: t for t in tasks}
    missing = sorted({s.task_id for s in states} - set(by_id))
    if missing:
        raise ConfigError(f"states of tasks {', '.join(missing)} but no such task was given")
    seeds = tuple(seeds) if seeds is not None else (sampling.seed if sampling.seed is not None else 0,)
    if not seeds or len(set(seeds)) != len(seeds):
        raise ConfigError(f"seeds must be distinct and at least one; got {list(seeds)}")
    prompt_config = prompt_config or PromptConfig()
    config = reward_config or RewardConfig()
    contexts = {t: RewardContext(by_id[t], config) for t in {s.task_id for s in states}}
    started = time.perf_counter()
    made = _generate(policy, states, by_id, prompt_config, sampling, seeds, batch_size)
    made.sort(key=lambda x: (x[0], seeds.index(x[1])))  # state by state, seeds in order

    def one(item: tuple[int, int, Any]) -> StepwiseRecord:
        i, seed, completion = item
        state = states[i]
        task, context = by_id[state.task_id], contexts[state.task_id]
        limits = RunLimits.of(None, task.spec.limits, timeout_s=run_timeout_s)
        outcome = run_step(state, completion.text, task, executor, context, limits=limits,
                           node_id=node_id_for(state, completion.text, salt=f"stepwise-{seed}"))
        node, best = outcome.node, state.journal.best_score
        improved = None
        if state.stage == "improve":
            lower = state.journal.is_lower_better
            improved = bool(node.valid and best is not None and (node.score < best if lower else node.score > best))
        delta = outcome.reward.delta
        if delta is not None:
            delta = min(max(delta, -config.delta_clip), config.delta_clip)
        record = StepwiseRecord(state.state_id, state.task_id, state.stage, node.outcome,
                                float(outcome.reward.total), node.score, best, improved, node.error,
                                int(completion.completion_tokens), state_headroom(state, task, context.baseline),
                                seed, state_reference(state, context.baseline), delta)
        if on_record is not None:
            on_record(record)
        return record

    generated = time.perf_counter()
    with ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="mleforge-stepwise") as pool:
        records = list(pool.map(one, made))
    timing = {"gen_s": round(generated - started, 3), "exec_s": round(time.perf_counter() - generated, 3)}
    to_dict = getattr(sampling, "to_dict", None)
    return StepwiseResult(policy_name or str(getattr(policy, "model", type(policy).__name__)),
                          tuple(dict.fromkeys(s.task_id for s in states)),
                          to_dict() if to_dict else dict(sampling or {}), prompt_config.profile, tuple(records),
                          dict(contamination or {}), timing, seeds, dict(draw or {}))
