"""Expert trajectories for SFT (ML-Agent's exploration-enriched fine-tuning): `mleforge collect`.

    result = collect_samples(CollectConfig(tasks="lite", teacher="template"), "runs/collect")
    result.samples_path   # samples.jsonl: one chat sample per expert step
    result.journals_dir   # journals/<task>/seed<s>-ep<e>/journal.json (EpisodeRunner folders)

Every episode is a run of the agent's search (`EpisodeRunner`) with the teacher as its
policy: the offline `template` expert, or any `openai:<model>` endpoint. Exploration
enrichment: each task's idea pool (`expert/ideas.py`, the template's catalog or the
teacher's own ideas) is reduced to its `idea_pool` most diverse ideas, and each episode
draws 1-3 of them (seeded by seed and episode) into its first prompt, so episodes differ.
The grid is tasks x seeds x episodes, `workers` episodes at a time.

A folder holds

    run.json        kind "collect", the tasks (the contamination guard reads them), teacher, config
    journals/       one EpisodeRunner folder per episode
    samples.jsonl   the SFT samples (below), rewritten whole at the end of every call
    collect.json    the counts: episodes, steps, outcomes, samples by stage, what was left out and why

Resumable: an episode that did all its steps is not run again and one that was cut short
continues from its journal (EpisodeRunner), and samples are made from the journals, never
from what a process held in memory, so a killed collect loses at most the step in flight.

Samples. One per expert step, in TRL's conversational prompt-completion format:

    {"prompt": [{"role": "system", ...}, {"role": "user", ...}],
     "completion": [{"role": "assistant", "content": ...}],
     "task_id", "stage", "state_id", "teacher", "ideas", "outcome", "valid", "score", "reward",
     "improved", "episode", "step", "node_id", "completion_format", "edits_visible", "prompt_profile"}

The prompt is rendered from the step's state with `prompt_profile` (independent of what
the teacher was shown: the state is stored, its prompt is a pure function of it). The
completion is written from the node's plan and script in the format its stage asks for:
the whole script for a draft; SEARCH/REPLACE edits from the target script for debug and
improve, even when the teacher wrote a whole script (the template always does): edits are
what the compact prompt asks for, they are several times shorter (cheap to generate on a
CPU), and they teach the change rather than a copy of the script. `write_action` checks
that parsing the completion gives back exactly the script that ran.

Kept by default: steps whose outcome was valid (for debug, that is a fixed bug). Left out
and counted: failures (`keep_failures` keeps them), steps with no completion to show (a
format error keeps no text), duplicates of a (state, completion) pair, and, where the
prompt shows only a view of the target script (`code_chars`), edits of lines the prompt
hides (`keep_hidden_edits` keeps them): they would teach the model to edit what it cannot see.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from mleforge.agent.actions import edit_blocks, keep_base_bookkeeping, write_action
from mleforge.agent.elision import target_view
from mleforge.agent.fields import RecordError
from mleforge.agent.journal import Journal
from mleforge.agent.prompt_config import PromptConfig
from mleforge.agent.prompts import render_prompt
from mleforge.agent.runner import EpisodeRunner
from mleforge.agent.state import State
from mleforge.errors import ConfigError
from mleforge.expert.collect_config import (
    COMPACT_COMPLETION_CHARS,
    EPISODE_FIELDS,
    JOURNALS_DIR,
    MAX_EPISODES,
    SAMPLES_FILE,
    SUMMARY_FILE,
    CollectConfig,
)
from mleforge.runs import RUN_RECORD
from mleforge.tasks.task import Task

if TYPE_CHECKING:
    from rich.console import Console

    from mleforge.policies import Policy
    from mleforge.sandbox import Executor
    from mleforge.tasks.registry import TaskRegistry


def _saved_budget(saved: dict[str, Any]) -> int:
    """The completion budget a collection's saved settings (its run.json "config") had: none
    for one made before budgets existed (no `completion_chars` key: the expert gave its long
    answers), whatever settings a later version has added or dropped since."""
    if "completion_chars" not in saved:
        return 0
    if saved["completion_chars"] is not None:
        return saved["completion_chars"]
    return COMPACT_COMPLETION_CHARS if saved.get("prompt_profile") == "compact" else 0


@dataclass(frozen=True)
class CollectResult:
    out_dir: str
    samples_path: str
    journals_dir: str
    tasks: tuple[str, ...]
    teacher: str
    counts: dict[str, Any] = field(default_factory=dict)  # as in collect.json
    ran: int = 0  # episodes run (or resumed) by this call
    skipped: int = 0  # episodes found finished
    interrupted: bool = False

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["tasks"] = list(self.tasks)
        return data


@dataclass(frozen=True)
class Episode:
    """One cell of the grid: a task, a seed, an episode index, and the ideas it starts from."""

    task: Task
    seed: int
    index: int
    ideas: tuple[str, ...]

    @property
    def name(self) -> str:
        return f"seed{self.seed}-ep{self.index}"

    @property
    def episode_seed(self) -> int:
        return self.seed * MAX_EPISODES + self.index


class _Stopped(BaseException):
    """Raised from a step callback to end an episode after its saved step (Ctrl-C)."""


def _write_json(path: Path, data: Any) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str), encoding="utf-8")
    os.replace(tmp, path)


def episode_dir(out_dir: str | Path, task_id: str, name: str) -> Path:
    return Path(out_dir) / JOURNALS_DIR / task_id.replace(":", "_").replace("/", "_") / name


# --- ideas -----------------------------------------------------------------------------------------


def episode_ideas(task: Task, config: CollectConfig, *, teacher: Any = None) -> list[tuple[str, ...]]:
    """The ideas of each episode of `task`, indexed [seed - first_seed][episode] flattened in
    seed-major order: 1-3 of the task's most diverse ideas, drawn with (seed, episode)."""
    from mleforge.expert.ideas import explore, make_embedder, sample_ideas

    if config.ideas_high == 0:
        return [() for _ in range(config.seeds * config.episodes)]
    source = teacher if config.idea_source == "teacher" and teacher is not None else "catalog"
    out = []
    for seed in range(config.first_seed, config.first_seed + config.seeds):
        selection = explore(task, k=config.idea_pool, source=source, embedder=make_embedder(config.embedder),
                            seed=seed)
        for index in range(config.episodes):
            rng = np.random.default_rng([seed, index])
            out.append(sample_ideas(selection.selected, rng, low=config.ideas_low, high=config.ideas_high))
    return out


# --- samples ---------------------------------------------------------------------------------------


def _steps_log(run_dir: Path) -> dict[str, dict[str, Any]]:
    """steps.jsonl by node id (a line cut by a kill is skipped: the journal holds the step)."""
    out: dict[str, dict[str, Any]] = {}
    path = run_dir / "steps.jsonl"
    if not path.is_file():
        return out
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        out[record.get("node_id", "")] = record
    return out


def episode_states(journal: Journal, ideas: Sequence[str] = ()) -> list[State]:
    """The state each node of an episode's journal was made from, as the search chose it:
    the journal before the node, the node's parent as target, and the episode's ideas in
    the first state only (`agent.search.next_state`)."""
    states = []
    for i, node in enumerate(journal.nodes):
        prefix = Journal(journal.task_id, journal.direction, journal.nodes[:i])
        if node.parent_id is None:
            states.append(State.draft(journal.task_id, tuple(ideas) if i == 0 else (), prefix, journal.direction))
            continue
        parent = prefix.get(node.parent_id)
        states.append(State.improve(prefix, parent.id) if parent.valid else State.debug(prefix, parent.id))
    return states


def _improved(state: State, score: float | None) -> bool | None:
    if state.stage != "improve" or score is None:
        return None
    best = state.journal.best_score
    return best is None or (score < best if state.journal.is_lower_better else score > best)


def episode_samples(run_dir: Path, task: Task, prompt_config: PromptConfig, *, teacher: str,
                    ideas: Sequence[str], keep_failures: bool = False, keep_hidden_edits: bool = False,
                    completion_chars: int = 0) -> tuple[list[dict[str, Any]], Counter]:
    """The samples of one finished (or partly finished) episode, and what was left out and why.
    Where the prompt hides the script's bookkeeping lines, the edits leave them as they are;
    `completion_chars` > 0: debug and improve samples over it are left out ("over_budget")."""
    journal = Journal.load(run_dir / "journal.json")
    log = _steps_log(run_dir)
    samples: list[dict[str, Any]] = []
    dropped: Counter = Counter()
    for state, node in zip(episode_states(journal, ideas), journal.nodes):
        logged = log.get(node.id)
        if logged is not None and logged.get("state_id") not in (None, state.state_id):
            raise RecordError(f"{run_dir}: node {node.id} was made from state {logged['state_id'][:12]}, "
                              f"but its journal gives state {state.state_id[:12]}; the folder is inconsistent")
        if node.execution is None:
            dropped["no_completion"] += 1  # a format error keeps no completion text
            continue
        if not node.valid and not keep_failures:
            dropped["failed"] += 1
            continue
        base = state.target.code if state.target is not None else None
        try:
            text = write_action(state.stage, node.plan, node.code, base,
                                keep_bookkeeping=prompt_config.hide_bookkeeping)
        except ValueError:
            dropped["unwritable"] += 1
            continue
        if completion_chars and base is not None and len(text) > completion_chars:
            dropped["over_budget"] += 1  # never cut: a cut edit teaches a broken answer
            continue
        visible = True
        if base is not None:
            hidden = target_view(state, prompt_config).hidden
            # The edits the completion holds: with bookkeeping kept, the base's header stays.
            edited = keep_base_bookkeeping(base, node.code) if prompt_config.hide_bookkeeping else node.code
            visible = not any(line in hidden for b in edit_blocks(base, edited) for line in b.base_lines)
        if not visible and not keep_hidden_edits:
            dropped["hidden_edits"] += 1
            continue
        reward = (logged or {}).get("reward") or {}
        samples.append({
            "prompt": render_prompt(state, task, prompt_config),
            "completion": [{"role": "assistant", "content": text}],
            "task_id": task.id, "stage": state.stage, "state_id": state.state_id, "teacher": teacher,
            "ideas": list(state.ideas), "outcome": node.outcome, "valid": node.valid, "score": node.score,
            "reward": reward.get("total"), "improved": _improved(state, node.score),
            "episode": f"{run_dir.parent.name}/{run_dir.name}", "step": node.step, "node_id": node.id,
            "completion_format": "script" if base is None else "edits", "edits_visible": visible,
            "prompt_profile": prompt_config.profile, "completion_chars": len(text),
        })
    return samples, dropped


# --- progress --------------------------------------------------------------------------------------


class CollectProgress:
    """Live progress with rich: the steps done over the whole grid and the episodes finished."""

    def __init__(self, console: Console | None = None, disable: bool = False):
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self.progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), TimeRemainingColumn(), console=console, disable=disable)
        self._bar: Any = None
        self._lock = threading.Lock()
        self._outcomes: Counter = Counter()
        self._episodes = [0, 0]

    def __enter__(self) -> CollectProgress:
        from mleforge.utils.plain_progress import PlainTicker

        self.progress.__enter__()
        self._ticker = PlainTicker(self.progress, self.progress.console)  # a log: a line every few seconds
        self._ticker.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._ticker.stop()
        self.progress.__exit__(*exc)

    def start(self, total_steps: int, done_steps: int, episodes: int, finished: int) -> None:
        self._episodes = [finished, episodes]
        self._bar = self.progress.add_task(self._label(), total=total_steps, completed=done_steps)

    def _label(self) -> str:
        valid = self._outcomes["valid"]
        steps = sum(self._outcomes.values())
        return (f"collect: {self._episodes[0]}/{self._episodes[1]} episodes"
                + (f", {valid}/{steps} steps valid" if steps else ""))

    def step(self, outcome: Any) -> None:
        with self._lock:
            self._outcomes[outcome.node.outcome] += 1
            self.progress.update(self._bar, advance=1, description=self._label())

    def episode_done(self, leftover_steps: int) -> None:
        with self._lock:
            self._episodes[0] += 1
            self.progress.update(self._bar, advance=leftover_steps, description=self._label())


# --- the grid --------------------------------------------------------------------------------------


class Collector:
    """One collect folder: `run()` runs (or resumes) the grid and writes the samples."""

    def __init__(self, config: CollectConfig, out_dir: str | Path, *, registry: TaskRegistry | None = None,
                 policy: Policy | None = None, executor: Executor | None = None,
                 progress: CollectProgress | None = None):
        from mleforge.tasks.registry import TaskRegistry

        self.config = config
        self.out_dir = Path(out_dir).resolve()
        self.registry = registry if registry is not None else TaskRegistry()
        self.tasks: list[Task] = self.registry.select(config.tasks)
        if not self.tasks:
            raise ConfigError(f"the task selector {config.tasks!r} matches no task; see `mleforge tasks list`")
        self._policy = policy
        self._executor = executor
        self.progress = progress
        self._stop = threading.Event()

    def _check_resumable(self) -> None:
        path = self.out_dir / RUN_RECORD
        if not path.is_file():
            return
        saved = json.loads(path.read_text(encoding="utf-8")).get("config", {})
        ours = self.config.to_dict()
        differ = [f"{k} {saved.get(k)!r} -> {ours[k]!r}" for k in EPISODE_FIELDS if saved.get(k) != ours[k]]
        if self.config.teacher == "template":  # the expert answers within the budget: another episode
            budget = _saved_budget(saved)
            if budget != self.config.completion_budget:
                differ.append(f"completion budget {budget} -> {self.config.completion_budget}")
        if differ:
            raise ConfigError(f"{self.out_dir} holds a collection made with other settings ({'; '.join(differ)}); "
                              "use another folder, or pass --fresh to start it again")

    def _make_policy(self) -> tuple[Any, bool]:
        from mleforge.policies.serialized import THREAD_SAFE_PREFIXES, SerializedPolicy

        if self._policy is not None:
            policy, owned = self._policy, False
        else:
            from mleforge.policies import make_policy

            options: dict[str, Any] = {}
            if self.config.teacher == "template":
                options = {"registry": self.registry, "completion_chars": self.config.completion_budget,
                           "view_chars": self.config.prompt_config.code_chars}
            policy, owned = make_policy(self.config.teacher, **options), True
        if self.config.teacher.partition(":")[0] not in THREAD_SAFE_PREFIXES:
            policy = SerializedPolicy(policy)
        return policy, owned

    def _grid(self, policy: Policy) -> list[Episode]:
        from mleforge.tasks.preparation import prepare

        grid = []
        for task in self.tasks:
            prepare(task)
            ideas = episode_ideas(task, self.config, teacher=policy)
            cells = [(s, e) for s in range(self.config.first_seed, self.config.first_seed + self.config.seeds)
                     for e in range(self.config.episodes)]
            grid += [Episode(task, s, e, i) for (s, e), i in zip(cells, ideas)]
        # Episode-major order: an interrupted collect has whole rounds over the tasks done first.
        return sorted(grid, key=lambda ep: (ep.index, ep.seed, self.tasks.index(ep.task)))

    def _done_steps(self, episode: Episode) -> int:
        path = episode_dir(self.out_dir, episode.task.id, episode.name) / "journal.json"
        return len(Journal.load(path)) if path.is_file() else 0

    def _run_one(self, episode: Episode, policy: Policy, executor: Executor) -> None:
        run_dir = episode_dir(self.out_dir, episode.task.id, episode.name)

        def on_step(outcome: Any) -> None:
            if self.progress is not None:
                self.progress.step(outcome)
            if self._stop.is_set() and outcome.node.step + 1 < self.config.steps:
                raise _Stopped

        if self._stop.is_set():
            return
        runner = EpisodeRunner(episode.task, policy, executor, self.config.episode_config(episode.episode_seed),
                               run_dir, ideas=episode.ideas, policy_name=self.config.teacher, on_step=on_step)
        try:
            result = runner.run()
        except _Stopped:
            return
        if self.progress is not None:
            self.progress.episode_done(max(0, self.config.steps - result.steps))

    def run(self, fresh: bool = False) -> CollectResult:
        import shutil

        if fresh and self.out_dir.exists():
            shutil.rmtree(self.out_dir)
        self._check_resumable()
        self.out_dir.mkdir(parents=True, exist_ok=True)
        record = {"kind": "collect", "teacher": self.config.teacher, "tasks": [t.id for t in self.tasks],
                  "config": self.config.to_dict()}
        _write_json(self.out_dir / RUN_RECORD, record)
        policy, owns_policy = self._make_policy()
        try:
            grid = self._grid(policy)
            done = {(ep.task.id, ep.name): self._done_steps(ep) for ep in grid}
            todo = [ep for ep in grid if done[(ep.task.id, ep.name)] < self.config.steps]
            if self.progress is not None:
                self.progress.start(len(grid) * self.config.steps, sum(done.values()), len(grid),
                                    len(grid) - len(todo))
            try:
                if todo:
                    self._run_todo(todo, policy)
            finally:
                # Written on an interruption too, from whatever the journals hold.
                result = self._write_samples(grid, ran=len(todo), interrupted=self._stop.is_set())
        finally:
            if owns_policy:
                policy.close()
        return result

    def _run_todo(self, todo: list[Episode], policy: Policy) -> None:
        from mleforge.sandbox import make_executor

        executor = self._executor if self._executor is not None else make_executor(self.config.executor, **({"isolation": self.config.isolation} if self.config.isolation else {}))
        pool = ThreadPoolExecutor(max_workers=self.config.resolved_workers, thread_name_prefix="mleforge-collect")
        futures: list[Future] = [pool.submit(self._run_one, ep, policy, executor) for ep in todo]
        try:
            pending = set(futures)
            while pending:
                finished, pending = wait(pending, return_when=FIRST_COMPLETED)
                for future in finished:
                    future.result()  # an episode's failure (a broken teacher, a sandbox error) ends the collect
        except BaseException:
            # Ctrl-C or a failed episode: queued episodes never start, running ones stop after their
            # current step, which is saved; the next call resumes them.
            self._stop.set()
            pool.shutdown(wait=True, cancel_futures=True)
            raise
        finally:
            pool.shutdown(wait=True)
            if self._executor is None:
                executor.close()

    def _write_samples(self, grid: list[Episode], ran: int, interrupted: bool) -> CollectResult:
        prompt_config = self.config.prompt_config
        seen: set[str] = set()
        samples: list[dict[str, Any]] = []
        dropped: Counter = Counter()
        outcomes: Counter = Counter()
        steps = finished = 0
        for episode in grid:
            run_dir = episode_dir(self.out_dir, episode.task.id, episode.name)
            if not (run_dir / "journal.json").is_file():
                continue
            journal = Journal.load(run_dir / "journal.json")
            steps += len(journal)
            finished += len(journal) >= self.config.steps
            outcomes.update(n.outcome for n in journal.nodes)
            kept, left_out = episode_samples(run_dir, episode.task, prompt_config, teacher=self.config.teacher,
                                             ideas=episode.ideas, keep_failures=self.config.keep_failures,
                                             keep_hidden_edits=self.config.keep_hidden_edits,
                                             completion_chars=self.config.completion_budget)
            dropped.update(left_out)
            for sample in kept:
                key = hashlib.sha256(f"{sample['state_id']}\0{sample['completion'][0]['content']}"
                                     .encode()).hexdigest()
                if key in seen:
                    dropped["duplicate"] += 1
                    continue
                seen.add(key)
                samples.append(sample)
        samples_path = self.out_dir / SAMPLES_FILE
        tmp = samples_path.with_name(f".{samples_path.name}.tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            for sample in samples:
                f.write(json.dumps(sample, ensure_ascii=False, allow_nan=False) + "\n")
        os.replace(tmp, samples_path)
        counts = {
            "episodes": {"expected": len(grid), "finished": finished},
            "steps": steps, "outcomes": dict(sorted(outcomes.items())),
            "samples": len(samples),
            "samples_by_stage": dict(sorted(Counter(s["stage"] for s in samples).items())),
            "samples_by_task": dict(sorted(Counter(s["task_id"] for s in samples).items())),
            "left_out": dict(sorted(dropped.items())),
        }
        summary = {"kind": "collect", "teacher": self.config.teacher, "tasks": [t.id for t in self.tasks],
                   "updated_at": datetime.now().isoformat(timespec="seconds"), "interrupted": interrupted,
                   "prompt_profile": prompt_config.profile, "completion_chars": self.config.completion_budget,
                   "config": self.config.to_dict(), **counts}
        _write_json(self.out_dir / SUMMARY_FILE, summary)
        return CollectResult(str(self.out_dir), str(samples_path), str(self.out_dir / JOURNALS_DIR),
                             tuple(t.id for t in self.tasks), self.config.teacher, counts,
                             ran=ran, skipped=len(grid) - ran, interrupted=interrupted)

    def stop(self) -> None:
        """End early: queued episodes do not start, running ones stop after their current step."""
        self._stop.set()


def collect_samples(config: CollectConfig, out_dir: str | Path, *, registry: TaskRegistry | None = None,
                    policy: Policy | None = None, executor: Executor | None = None,
                    progress: bool | CollectProgress = False, fresh: bool = False,
                    console: Console | None = None) -> CollectResult:
    """Run (or resume) the expert episodes of `config` in `out_dir` and write their SFT
    samples; see the module doc. `progress=True` shows a rich bar on `console` (stderr)."""
    listener: CollectProgress | None
    if isinstance(progress, CollectProgress):
        listener = progress
    elif progress:
        if console is None:
            from rich.console import Console

            console = Console(stderr=True)
        listener = CollectProgress(console)
    else:
        listener = None
    collector = Collector(config, out_dir, registry=registry, policy=policy, executor=executor, progress=listener)
    if listener is None or isinstance(progress, CollectProgress):
        return collector.run(fresh=fresh)
    with listener:
        return collector.run(fresh=fresh)

