"""The evaluation grid: one episode per (task, seed), in parallel, resumable, aggregated.

An evaluation folder holds

    run.json                     kind "eval", the tasks and seeds, the config, the contamination check
    leaderboards.json            each task's leaderboard scores (reports plot against them)
    runs/<task>/seed<k>/         an EpisodeRunner folder, plus report.json (or error.json)
    aggregate.json               the aggregate (mleforge.eval.aggregate), with the config

A run is finished when its result.json exists and its config.json matches this
evaluation's episode settings; finished runs are loaded, not redone, so an interrupted
evaluation resumes where it stopped (an unfinished episode resumes from its journal).

Concurrency: `workers` threads share one policy and one executor. Executions, the slow
part, overlap; a policy's `generate` calls are serialized (one at a time) unless it is an
`openai:` endpoint, whose server batches concurrent requests itself. A local torch model
is thus never entered from two threads (HFPolicy also holds its own lock).
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import traceback
from collections.abc import Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from mleforge.agent.runner import EpisodeRunner
from mleforge.errors import ConfigError
from mleforge.eval.aggregate import aggregate
from mleforge.eval.config import RUN_FIELDS, EvalConfig
from mleforge.eval.contamination import Contamination, check_contamination
from mleforge.eval.records import RunFailure, RunReport
from mleforge.grading.grader import no_submission_report
from mleforge.policies.serialized import THREAD_SAFE_PREFIXES, SerializedPolicy
from mleforge.runs import RUN_RECORD

if TYPE_CHECKING:
    from mleforge.policies import Policy
    from mleforge.sandbox import Executor
    from mleforge.tasks.registry import TaskRegistry
from mleforge.tasks.task import Task

AGGREGATE_FILE = "aggregate.json"
LEADERBOARDS_FILE = "leaderboards.json"


class GridListener(Protocol):
    """Progress of the grid; called from worker threads."""

    def start(self, grid: Sequence[tuple[str, int]], finished: Sequence[tuple[str, int]], steps: int) -> None: ...

    def step(self, task_id: str, seed: int, outcome: Any) -> None: ...

    def done(self, task_id: str, seed: int, record: RunReport | RunFailure) -> None: ...


@dataclass(frozen=True)
class EvalResult:
    eval_dir: str
    aggregate: dict[str, Any]
    ran: int  # runs executed (or resumed) now
    skipped: int  # runs found finished
    failed: int


class _Stopped(BaseException):
    """Raised from a step callback to end an episode after its current step (the grid was
    interrupted). A BaseException, so a run's failure handling never records it."""


def safe_name(task_id: str) -> str:
    return task_id.replace(":", "_").replace("/", "_")


def run_dir_for(eval_dir: str | Path, task_id: str, seed: int) -> Path:
    return Path(eval_dir) / "runs" / safe_name(task_id) / f"seed{seed}"


def _write_json(path: Path, data: Any) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str), encoding="utf-8")
    os.replace(tmp, path)


def _canonical(data: Any) -> Any:
    return json.loads(json.dumps(data, default=str))


class EvalGrid:
    """One evaluation: `run()` executes the grid and returns the aggregate."""

    def __init__(self, config: EvalConfig, eval_dir: str | Path, *, registry: TaskRegistry | None = None,
                 policy: Policy | None = None, executor: Executor | None = None, listener: GridListener | None = None):
        from mleforge.tasks.registry import TaskRegistry

        self.config = config
        self.eval_dir = Path(eval_dir).resolve()
        self.registry = registry if registry is not None else TaskRegistry()
        self.tasks: list[Task] = self.registry.select(config.tasks)
        if not self.tasks:
            raise ConfigError(f"the task selector {config.tasks!r} matches no task; see `mleforge tasks list`")
        self.seeds = config.seed_list
        self._policy = policy
        self._executor = executor
        self._isolation: dict[str, Any] | None = None  # of the executor this session ran with
        self.listener = listener
        self._stop = threading.Event()
        self.contamination: Contamination = check_contamination(
            config.policy, [t.id for t in self.tasks], config.train_runs)

    # --- the folder ---

    def _check_resumable(self) -> None:
        path = self.eval_dir / RUN_RECORD
        if not path.is_file():
            return
        saved = json.loads(path.read_text(encoding="utf-8")).get("config", {})
        ours = self.config.to_dict()
        differ = [f"{k} {saved.get(k)!r} -> {ours[k]!r}" for k in RUN_FIELDS if saved.get(k) != ours[k]]
        if differ:
            raise ConfigError(f"{self.eval_dir} holds an evaluation with other settings ({'; '.join(differ)}); "
                              "use another folder, or pass --fresh to start it again")

    def _write_records(self) -> None:
        from mleforge.tasks.preparation import prepare

        self.eval_dir.mkdir(parents=True, exist_ok=True)
        record = {"kind": "eval", "policy": self.config.policy, "protocol": protocol(self.config.feedback),
                  "tasks": [t.id for t in self.tasks],
                  "seeds": self.seeds, "config": self.config.to_dict(),
                  "contamination": self.contamination.to_dict()}
        _write_json(self.eval_dir / RUN_RECORD, record)
        boards = {}
        for task in self.tasks:
            prepare(task)
            boards[task.id] = {"metric": task.spec.metric_name, "is_lower_better": task.is_lower_better,
                               "scores": [float(s) for s in task.leaderboard()["score"]]}
        _write_json(self.eval_dir / LEADERBOARDS_FILE, boards)

    def _no_valid(self, task: Task, run_dir: Path) -> Any:
        # The grader's own report: the bare MLE-bench id and its file-order thresholds.
        return no_submission_report(task, run_dir / "submission.csv",
                                    "no step of the episode produced a valid submission",
                                    feedback=self.config.feedback)

    def _finished(self, task: Task, seed: int) -> RunReport | None:
        """The report of a finished run with this evaluation's settings; None if it must run."""
        run_dir = run_dir_for(self.eval_dir, task.id, seed)
        config_path = run_dir / "config.json"
        if not config_path.is_file():
            return None
        saved = json.loads(config_path.read_text(encoding="utf-8"))
        expected = _canonical(self.config.episode(seed).to_dict())
        if saved.get("episode") != expected or saved.get("policy") != self.config.policy:
            raise ConfigError(f"{run_dir} was run with other settings than this evaluation's; "
                              "use another folder, or pass --fresh to start it again")
        result_path = run_dir / "result.json"
        if not result_path.is_file():
            return None
        report_path = run_dir / "report.json"
        if report_path.is_file():
            return RunReport.from_dict(json.loads(report_path.read_text(encoding="utf-8")))
        # Finished but stopped before its report was written: make it from result.json.
        report = RunReport.from_episode(json.loads(result_path.read_text(encoding="utf-8")), seed,
                                        self._no_valid(task, run_dir))
        _write_json(report_path, report.to_dict())
        return report

    # --- one run ---

    def _run_one(self, task: Task, seed: int, policy: Policy, executor: Executor) -> RunReport | RunFailure | None:
        """Run one episode; None when the grid was stopped before it finished."""
        run_dir = run_dir_for(self.eval_dir, task.id, seed)

        def on_step(outcome: Any) -> None:
            if self.listener is not None:
                self.listener.step(task.id, seed, outcome)
            # After its last step an episode only grades its answer: let it finish.
            if self._stop.is_set() and outcome.node.step + 1 < self.config.steps:
                raise _Stopped

        record: RunReport | RunFailure
        try:
            if self._stop.is_set():
                return None
            runner = EpisodeRunner(task, policy, executor, self.config.episode(seed), run_dir,
                                   policy_name=self.config.policy, on_step=on_step)
            result = runner.run()
            record = RunReport.from_episode(result.to_dict(), seed, self._no_valid(task, run_dir))
            _write_json(run_dir / "report.json", record.to_dict())
            (run_dir / "error.json").unlink(missing_ok=True)
        except _Stopped:
            return None  # stopped after a saved step: unfinished, resumed next time
        except Exception as exc:  # one run's failure is recorded; the grid goes on
            record = RunFailure(task.id, seed, f"{type(exc).__name__}: {exc}", str(run_dir))
            run_dir.mkdir(parents=True, exist_ok=True)
            _write_json(run_dir / "error.json", {**record.to_dict(), "traceback": traceback.format_exc()})
        if self.listener is not None:
            self.listener.done(task.id, seed, record)
        return record

    # --- the grid ---

    def stop(self) -> None:
        """End the grid early (a budget ran out; any thread may call it): queued runs do not
        start, running ones stop after their current step, and `run` returns the aggregate
        of what finished, marked interrupted. Unfinished runs resume next time."""
        self._stop.set()

    def _make_policy(self) -> tuple[Any, bool]:
        """(the policy, whether this grid made it and so must close it)."""
        if self._policy is not None:
            policy, owned = self._policy, False
        else:
            from mleforge.policies import make_policy

            options = dict(self.config.policy_options)
            if self.config.policy.partition(":")[0] == "template":
                options.setdefault("registry", self.registry)
            policy, owned = make_policy(self.config.policy, **options), True
        if self.config.policy.partition(":")[0] not in THREAD_SAFE_PREFIXES:
            policy = SerializedPolicy(policy)
        return policy, owned

    def run(self, fresh: bool = False) -> EvalResult:
        if fresh and self.eval_dir.exists():
            shutil.rmtree(self.eval_dir)
        self._check_resumable()
        self._write_records()
        # Seed-major order: an interrupted evaluation has whole seeds done first.
        grid = [(task, seed) for seed in self.seeds for task in self.tasks]
        reports: list[RunReport] = []
        todo: list[tuple[Task, int]] = []
        for task, seed in grid:
            report = self._finished(task, seed)
            if report is None:
                todo.append((task, seed))
            else:
                reports.append(report)
        if self.listener is not None:
            self.listener.start([(t.id, s) for t, s in grid], [(r.task_id, r.seed) for r in reports],
                                self.config.steps)
        failures: list[RunFailure] = []
        try:
            if todo:
                self._run_todo(todo, reports, failures)
        finally:
            # Written on an interruption too: what finished is reported, the rest is missing.
            summary = self._write_aggregate(reports, failures, interrupted=self._stop.is_set())
        return EvalResult(str(self.eval_dir), summary, ran=len(todo), skipped=len(grid) - len(todo),
                          failed=len(failures))

    def _run_todo(self, todo: list[tuple[Task, int]], reports: list[RunReport],
                  failures: list[RunFailure]) -> None:
        from mleforge.sandbox import describe_isolation, make_executor

        policy, owns_policy = self._make_policy()
        executor = self._executor
        if executor is None:
            options = {} if self.config.isolation is None else {"isolation": self.config.isolation}
            executor = make_executor(self.config.executor, **options)
        self._isolation = describe_isolation(executor)
        pool = ThreadPoolExecutor(max_workers=self.config.resolved_workers, thread_name_prefix="mleforge-eval")
        futures = [pool.submit(self._run_one, t, s, policy, executor) for t, s in todo]
        collected: set[Future] = set()

        def collect(future: Future) -> None:
            record = future.result()  # re-raises an interruption from a worker
            collected.add(future)
            if isinstance(record, RunReport):
                reports.append(record)
            elif isinstance(record, RunFailure):
                failures.append(record)

        try:
            pending = set(futures)
            while pending:
                finished, pending = wait(pending, return_when=FIRST_COMPLETED)
                for future in finished:
                    collect(future)
        except BaseException:
            # Interrupted (Ctrl-C here, or from inside a run): queued runs never start and
            # running ones stop after their current step, which is saved. Runs that
            # finished meanwhile still count.
            self._stop.set()
            pool.shutdown(wait=True, cancel_futures=True)
            for future in futures:
                if future not in collected and future.done() and not future.cancelled() \
                        and future.exception() is None:
                    collect(future)
            raise
        finally:
            pool.shutdown(wait=True)
            if self._executor is None:
                executor.close()
            if owns_policy:
                policy.close()

    def _write_aggregate(self, reports: list[RunReport], failures: list[RunFailure],
                         interrupted: bool) -> dict[str, Any]:
        summary = aggregate(reports, [t.id for t in self.tasks], self.seeds, failures)
        isolation = self._isolation
        if isolation is None and (self.eval_dir / AGGREGATE_FILE).is_file():  # nothing ran: as before
            isolation = json.loads((self.eval_dir / AGGREGATE_FILE).read_text()).get("isolation")
        summary = {"kind": "eval", "policy": self.config.policy, "eval_dir": str(self.eval_dir),
                   "protocol": protocol(self.config.feedback),
                   "updated_at": datetime.now().isoformat(timespec="seconds"), "interrupted": interrupted,
                   "config": self.config.to_dict(), "contamination": self.contamination.to_dict(),
                   "isolation": isolation, **summary}
        _write_json(self.eval_dir / AGGREGATE_FILE, summary)
        return summary


def protocol(feedback: str) -> dict[str, str]:
    """What the runs of an evaluation saw and what their final grade is on, for its records."""
    return {
        "feedback": feedback,
        "shown_to_agent": ("each submission's score on the public part of the test answers (about 30%)"
                           if feedback == "public" else "execution output only, no score (MLE-bench's protocol)"),
        "final_grade": "the private part of the test answers (mlebench: ids: MLE-bench's full grade)",
    }


def run_eval(config: EvalConfig, eval_dir: str | Path, *, registry: TaskRegistry | None = None,
             policy: Policy | None = None, executor: Executor | None = None,
             listener: GridListener | None = None, fresh: bool = False) -> EvalResult:
    """Run (or resume) the evaluation grid of `config` in `eval_dir`; see the module doc."""
    return EvalGrid(config, eval_dir, registry=registry, policy=policy, executor=executor,
                    listener=listener).run(fresh=fresh)
