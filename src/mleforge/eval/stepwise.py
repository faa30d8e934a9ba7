"""Step-wise evaluation (ML-Agent's unit): one sampled completion for each of a fixed set of states.

    states = stepwise_states(tasks, n_states=24, seed=0, work_dir="runs/eval-stepwise/x/expert")
    result = run_stepwise(policy, states, tasks, executor, sampling=SamplingConfig(temperature=0.7, seed=0))
    rows = compare_stepwise(before, after)       # the before/after table of a training run

The states come from expert journals of the given tasks (`journals=`, or made on the fly by
the template expert with `mleforge collect` into `work_dir`, where later calls find them):
every state along every journal, deduplicated, drawn with a seed, task by task in turn so
that each task is represented. Each state gets one completion at fixed sampling settings,
executed, graded and rewarded exactly as a GRPO rollout is (`agent.step.run_step` with the
task's `RewardContext`).

Reported, each as the mean over states with its standard error (sample std with ddof=1 over
sqrt(n), as `eval.aggregate.mean_sem`; None for n = 1):
- format_error_rate: completions with no parsable action;
- valid_rate: completions whose run wrote a valid submission;
- mean_reward: the reward module's total;
- improve_rate: over improve states only, valid runs that beat the state's best score;
- improve_rate_headroom: the same over the improve states whose best is not already the
  metric's perfect value (penguins' expert reaches accuracy 1.0: no run can beat that), so
  that a rate of 0 says the policy did not improve where it could.
The same figures per stage are in `by_stage`.

A folder written by `cmd_eval_stepwise` (cli/stepwise.py) holds run.json (kind "stepwise",
policy, tasks, the contamination check) and stepwise.json (`StepwiseResult.to_dict()`);
`mleforge report` renders it with the section registered here.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
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
from mleforge.eval.report import Callout, LoadedRun, Section, Table, Text, register_section
from mleforge.tasks.task import Task

if TYPE_CHECKING:
    from mleforge.policies import Policy, SamplingConfig
    from mleforge.reward import RewardConfig
    from mleforge.sandbox import Executor
    from mleforge.tasks.registry import TaskRegistry

RESULT_FILE = "stepwise.json"
METRICS = (("format_error_rate", "format errors %", 100.0), ("valid_rate", "valid %", 100.0),
           ("mean_reward", "mean reward", 1.0), ("improve_rate", "improved on best % (improve states)", 100.0),
           ("improve_rate_headroom", "improved on best % (improve states below a perfect score)", 100.0))
COMPARE_COLUMNS = ("metric", "before", "after", "change")


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


def stepwise_states(tasks: Sequence[Task], *, n_states: int, seed: int,
                    journals: str | Path | Sequence[Journal] | None = None,
                    work_dir: str | Path | None = None, stages: Sequence[str] = ("draft", "debug", "improve"),
                    registry: TaskRegistry | None = None, episodes: int = 1, steps: int = 6,
                    executor: Executor | None = None, progress: bool = False,
                    console: Console | None = None) -> list[State]:
    """A fixed, seeded set of at most `n_states` states along expert journals of `tasks`.

    `journals`: a folder (of `mleforge collect` or `mleforge eval` output) or Journal records;
    None makes them with the template expert in `work_dir`. Candidates are every state along
    every journal of the tasks whose stage is in `stages`, deduplicated by id and sorted by
    id; each task's are shuffled with `seed` and the tasks take turns (in the given order)."""
    if isinstance(n_states, bool) or not isinstance(n_states, int) or n_states < 1:
        raise ConfigError(f"n_states must be an integer >= 1; got {n_states!r}")
    if not tasks:
        raise ConfigError("stepwise evaluation needs at least one task")
    if journals is None:
        if work_dir is None:
            raise ConfigError("give journals (a folder or records) or a work_dir to make them in")
        records = collected_journals(tasks, work_dir, registry=registry, episodes=episodes, steps=steps,
                                     executor=executor, progress=progress, console=console)
    elif isinstance(journals, (str, Path)):
        from mleforge.expert.episodes import load_journals

        records = load_journals(journals)
    else:
        records = list(journals)
    ids = [t.id for t in tasks]
    by_task: dict[str, dict[str, State]] = {t: {} for t in ids}
    for journal in records:
        if journal.task_id in by_task:
            for state in _journal_states(journal):
                if state.stage in stages:
                    by_task[journal.task_id].setdefault(state.state_id, state)
    empty = [t for t in ids if not by_task[t]]
    if len(empty) == len(ids):
        raise ConfigError(f"no {'/'.join(stages)} states in the journals of {', '.join(ids)}; "
                          "collect expert journals of these tasks first (mleforge collect)")
    rng = np.random.default_rng(seed)
    queues = []
    for task_id in ids:
        pool = [by_task[task_id][k] for k in sorted(by_task[task_id])]
        queues.append([pool[i] for i in rng.permutation(len(pool))])
    chosen: list[State] = []
    while len(chosen) < n_states and any(queues):
        for queue in queues:
            if queue and len(chosen) < n_states:
                chosen.append(queue.pop(0))
    return chosen


# --- the records -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class StepwiseRecord:
    """One state's completion and what became of it."""

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
    headroom: bool | None = None  # improve states: best_before is not the metric's perfect value

    @property
    def format_error(self) -> bool:
        return self.outcome == "format_error"

    @property
    def valid(self) -> bool:
        return self.outcome == "valid"

    def to_dict(self) -> dict[str, Any]:
        return {"state_id": self.state_id, "task_id": self.task_id, "stage": self.stage, "outcome": self.outcome,
                "reward": self.reward, "score": self.score, "best_before": self.best_before,
                "improved": self.improved, "error": self.error, "completion_tokens": self.completion_tokens,
                "headroom": self.headroom}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StepwiseRecord:
        return cls(**{k: data[k] for k in ("state_id", "task_id", "stage", "outcome", "reward", "score",
                                            "best_before", "improved", "error", "completion_tokens")},
                   headroom=data.get("headroom"))  # absent in results written before it existed


def stepwise_metrics(records: Sequence[StepwiseRecord]) -> dict[str, dict[str, Any]]:
    """Each metric as {"mean", "sem", "n"} (see the module doc); improve_rate over improve states."""
    improve = [r for r in records if r.stage == "improve"]
    room = [r for r in improve if r.headroom is not False]
    return {
        "format_error_rate": mean_sem([float(r.format_error) for r in records]),
        "valid_rate": mean_sem([float(r.valid) for r in records]),
        "mean_reward": mean_sem([r.reward for r in records]),
        "improve_rate": mean_sem([float(bool(r.improved)) for r in improve]),
        "improve_rate_headroom": mean_sem([float(bool(r.improved)) for r in room]),
    }


@dataclass(frozen=True)
class StepwiseResult:
    policy: str
    tasks: tuple[str, ...]
    sampling: dict[str, Any]
    prompt_profile: str
    records: tuple[StepwiseRecord, ...]
    contamination: dict[str, Any] = field(default_factory=dict)
    timing: dict[str, float] = field(default_factory=dict)  # gen_s, exec_s: wall seconds of each phase

    @property
    def metrics(self) -> dict[str, dict[str, Any]]:
        return stepwise_metrics(self.records)

    @property
    def by_stage(self) -> dict[str, dict[str, dict[str, Any]]]:
        stages = dict.fromkeys(r.stage for r in self.records)
        return {s: stepwise_metrics([r for r in self.records if r.stage == s]) for s in stages}

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "stepwise", "policy": self.policy, "tasks": list(self.tasks), "sampling": dict(self.sampling),
                "prompt_profile": self.prompt_profile, "n_states": len(self.records),
                "metrics": self.metrics, "by_stage": self.by_stage,  # derived; recomputed by from_dict
                "records": [r.to_dict() for r in self.records], "contamination": dict(self.contamination),
                "timing": dict(self.timing)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StepwiseResult:
        try:
            return cls(policy=data["policy"], tasks=tuple(data["tasks"]), sampling=dict(data["sampling"]),
                       prompt_profile=data["prompt_profile"],
                       records=tuple(StepwiseRecord.from_dict(r) for r in data["records"]),
                       contamination=dict(data.get("contamination") or {}),
                       timing=dict(data.get("timing") or {}))
        except (KeyError, TypeError) as exc:
            raise ConfigError(f"not a step-wise evaluation result: {exc!r}") from None


# --- running ---------------------------------------------------------------------------------------


@contextmanager
def record_progress(title: str, total: int, enabled: bool = True,
                    console: Console | None = None) -> Iterator[Callable[[Any], None]]:
    """A rich bar on `console` (stderr by default) counting the states whose completion has run
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


def perfect_score(task: Task) -> float | None:
    """The value a perfect submission scores on `task`'s named metric; None for a task that
    grades with a function of its own (no bound known)."""
    from mleforge.grading.metrics import get_metric

    if task.spec.grade_fn is not None or not task.spec.metric:
        return None
    try:
        return float(get_metric(task.spec.metric).best)
    except KeyError:
        return None


def run_stepwise(policy: Policy, states: Sequence[State], tasks: Sequence[Task] | Mapping[str, Task],
                 executor: Executor, *, sampling: SamplingConfig, prompt_config: PromptConfig | None = None,
                 reward_config: RewardConfig | None = None,
                 policy_name: str | None = None, batch_size: int = 8, workers: int = 2,
                 run_timeout_s: float | None = None, contamination: Mapping[str, Any] | None = None,
                 on_record: Any = None) -> StepwiseResult:
    """One completion per state (prompts in batches of `batch_size`, at `sampling`), each run
    through `run_step` (`workers` at a time) and rewarded with its task's RewardContext."""
    from mleforge.reward import RewardConfig
    from mleforge.sandbox import RunLimits

    by_id = dict(tasks) if isinstance(tasks, Mapping) else {t.id: t for t in tasks}
    missing = sorted({s.task_id for s in states} - set(by_id))
    if missing:
        raise ConfigError(f"states of tasks {', '.join(missing)} but no such task was given")
    prompt_config = prompt_config or PromptConfig()
    contexts = {t: RewardContext(by_id[t], reward_config or RewardConfig()) for t in {s.task_id for s in states}}
    completions = []
    started = time.perf_counter()
    for start in range(0, len(states), batch_size):
        batch = list(states[start:start + batch_size])
        prompts = [render_prompt(s, by_id[s.task_id], prompt_config) for s in batch]
        completions += [c[0] for c in policy.generate(prompts, n=1, sampling=sampling, states=batch)]

    def one(i: int) -> StepwiseRecord:
        state, completion = states[i], completions[i]
        task = by_id[state.task_id]
        limits = RunLimits.of(None, task.spec.limits, timeout_s=run_timeout_s)
        outcome = run_step(state, completion.text, task, executor, contexts[state.task_id], limits=limits,
                           node_id=node_id_for(state, completion.text, salt="stepwise"))
        node, best = outcome.node, state.journal.best_score
        improved = headroom = None
        if state.stage == "improve":
            lower = state.journal.is_lower_better
            improved = bool(node.valid and best is not None and (node.score < best if lower else node.score > best))
            perfect = perfect_score(task)
            headroom = best is None or perfect is None or (best > perfect if lower else best < perfect)
        record = StepwiseRecord(state.state_id, state.task_id, state.stage, node.outcome,
                                float(outcome.reward.total), node.score, best, improved, node.error,
                                int(completion.completion_tokens), headroom)
        if on_record is not None:
            on_record(record)
        return record

    generated = time.perf_counter()
    with ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="mleforge-stepwise") as pool:
        records = list(pool.map(one, range(len(states))))
    timing = {"gen_s": round(generated - started, 3), "exec_s": round(time.perf_counter() - generated, 3)}
    to_dict = getattr(sampling, "to_dict", None)
    return StepwiseResult(policy_name or str(getattr(policy, "model", type(policy).__name__)),
                          tuple(dict.fromkeys(s.task_id for s in states)),
                          to_dict() if to_dict else dict(sampling or {}), prompt_config.profile, tuple(records),
                          dict(contamination or {}), timing)


# --- comparing -------------------------------------------------------------------------------------


def _number(value: float, scale: float) -> str:
    """Rates in percent with one decimal; rewards with three."""
    return f"{value * scale:.1f}" if scale != 1.0 else f"{value:.3f}"


def pm(metric: Mapping[str, Any], scale: float) -> str:
    """'mean ± sem' of a metric; '–' when there is no value."""
    if metric.get("mean") is None:
        return "–"
    sem = "" if metric.get("sem") is None else f" ± {_number(metric['sem'], scale)}"
    return _number(metric["mean"], scale) + sem


def _change(a: Mapping[str, Any], b: Mapping[str, Any], scale: float) -> str:
    """b's mean less a's, with the standard error of the difference of two independent means."""
    if a["mean"] is None or b["mean"] is None:
        return "–"
    change = ("+" if b["mean"] >= a["mean"] else "-") + _number(abs(b["mean"] - a["mean"]), scale)
    if a["sem"] is not None and b["sem"] is not None:
        change += " ± " + _number(math.hypot(a["sem"], b["sem"]), scale)
    return change


ROOM_ROW = "improve states below a perfect score"


def _room(result: StepwiseResult) -> int:
    return int(result.metrics["improve_rate_headroom"]["n"])


def compare_stepwise(before: StepwiseResult, after: StepwiseResult) -> list[tuple[str, str, str, str]]:
    """Rows of COMPARE_COLUMNS: each metric before and after (mean ± SEM) and the change of
    the mean, with the standard error of the difference of two independent means."""
    rows = []
    for key, name, scale in METRICS:
        a, b = before.metrics[key], after.metrics[key]
        rows.append((name, pm(a, scale), pm(b, scale), _change(a, b, scale)))
    rows.append(("states", str(len(before.records)), str(len(after.records)), "–"))
    rows.append((ROOM_ROW, str(_room(before)), str(_room(after)), "–"))
    return rows


def compare_stages(stages: Sequence[tuple[str, StepwiseResult]]) -> tuple[tuple[str, ...], list[tuple[str, ...]]]:
    """Columns and rows of two or more evaluations of the same states, in order (e.g. before,
    after the warm start, after GRPO): each one's mean ± SEM, then the change from each to the
    next (so the warm start's share of a gain and GRPO's own are apart). Two stages give
    COMPARE_COLUMNS' table."""
    if len(stages) < 2:
        raise ValueError(f"compare_stages: give two or more evaluations, got {len(stages)}")
    if len(stages) == 2:
        return COMPARE_COLUMNS, compare_stepwise(stages[0][1], stages[1][1])
    labels = [label for label, _ in stages]
    columns = ("metric", *labels, *(f"{b} − {a}" for a, b in zip(labels, labels[1:])))
    rows: list[tuple[str, ...]] = []
    for key, name, scale in METRICS:
        values = [result.metrics[key] for _, result in stages]
        rows.append((name, *(pm(v, scale) for v in values),
                     *(_change(a, b, scale) for a, b in zip(values, values[1:]))))
    rows.append(("states", *(str(len(r.records)) for _, r in stages), *("–" for _ in stages[1:])))
    rows.append((ROOM_ROW, *(str(_room(r)) for _, r in stages), *("–" for _ in stages[1:])))
    return columns, rows


# --- the report section ----------------------------------------------------------------------------


def _result(run: LoadedRun) -> StepwiseResult | None:
    data = run.files.get("stepwise")
    return None if not data else StepwiseResult.from_dict(data)


def stepwise_section(runs: Sequence[LoadedRun]) -> list[Section]:
    done = [(r, _result(r)) for r in runs]
    blocks: list[Any] = []
    for run, result in done:
        if result is None:
            blocks.append(Callout(f"{run.label}: no {RESULT_FILE} in {run.path} (the evaluation never finished)"))
        elif (result.contamination or {}).get("warning"):
            blocks.append(Callout(f"{run.label}: {result.contamination['warning']}"))
    results = [(r, x) for r, x in done if x is not None]
    if not results:
        return [Section("Step-wise evaluation", tuple(blocks))]
    labels = [r.label for r, _ in results]
    rows = [(name, *(pm(x.metrics[key], scale) for _, x in results)) for key, name, scale in METRICS]
    rows.append(("states", *(len(x.records) for _, x in results)))
    rows.append((ROOM_ROW, *(_room(x) for _, x in results)))
    blocks.append(Table(("metric", *labels), tuple(rows), "mean ± SEM over states (sample std / sqrt(n))"))
    if len(results) >= 2:
        base_label, base = labels[0], results[0][1]
        for label, (_, result) in zip(labels[1:], results[1:]):
            blocks.append(Table(COMPARE_COLUMNS, tuple(compare_stepwise(base, result)),
                                f"{base_label} (before) against {label} (after); change ± its standard error"))
    blocks.append(Text("One sampled completion per state, at the same sampling settings for every run; states "
                       "from expert journals. Improvement counts improve states whose run beat the state's best."))
    return [Section("Step-wise evaluation", tuple(blocks))]


register_section("stepwise", stepwise_section)
