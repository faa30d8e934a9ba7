"""The episode runner: AIDE-style search on one task with one policy, saved as it goes.

A run directory holds

    config.json        what was asked (task, policy, search, limits, seed) and the isolation
    journal.json       the tree of attempts, rewritten atomically after every step
    steps.jsonl        one line per step: stage, outcome, reward components, score, tokens,
                       generation and execution seconds
    nodes/<node id>/   script.py, and submission.csv when one was written
    result.json        the final answer: the best valid node, graded on the private part

What the run sees of its own submissions is `feedback`: "public" (each node's score on the
public part of the test answers, in prompts and for the search's choices) or "none"
(execution output only; the search improves the last valid node and answers with it). The
private part is graded once, in `result.json`, after the last step.

A run interrupted at any point resumes from its journal: finished steps are not
redone, and each step's random choices depend only on (seed, step).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mleforge.agent.journal import Journal
from mleforge.agent.prompt_config import PromptConfig
from mleforge.agent.prompts import render_prompt
from mleforge.agent.search import SearchConfig, next_state
from mleforge.agent.step import RewardContext, StepOutcome, node_id_for, run_step
from mleforge.errors import ConfigError
from mleforge.grading.grader import grade
from mleforge.grading.report import GradeReport
from mleforge.reward import RewardConfig
from mleforge.sandbox import RunLimits
from mleforge.tasks.answer_split import check_feedback
from mleforge.tasks.task import Task


@dataclass(frozen=True)
class EpisodeConfig:
    steps: int = 8
    time_limit_s: float | None = None  # wall time for the whole episode; checked between steps
    run_timeout_s: float | None = None  # per execution; default the task's limit
    seed: int = 0
    search: SearchConfig = field(default_factory=SearchConfig)
    prompt: PromptConfig = field(default_factory=PromptConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    max_new_tokens: int = 2048
    temperature: float = 0.7
    feedback: str = "public"  # "public" scores shown and selected by, or "none"

    def __post_init__(self) -> None:
        check_feedback(self.feedback)
        if self.steps < 1:
            raise ConfigError(f"steps must be >= 1; got {self.steps}")
        if self.time_limit_s is not None and self.time_limit_s <= 0:
            raise ConfigError(f"time_limit_s must be > 0; got {self.time_limit_s}")
        if self.run_timeout_s is not None and self.run_timeout_s <= 0:
            raise ConfigError(f"run_timeout_s must be > 0; got {self.run_timeout_s}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class EpisodeResult:
    task_id: str
    run_dir: str
    steps: int
    best_node_id: str | None
    report: GradeReport | None  # the best valid node's submission, graded; None if none was valid
    steps_to_first_valid: int | None  # 1-based step of the first valid submission
    wall_s: float
    completion_tokens: int
    prompt_tokens: int
    stopped_by: str  # "steps" | "time_limit"
    feedback: str = "public"  # what the run was shown: "public" scores, or "none"

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["report"] = None if self.report is None else self.report.to_dict()
        return data


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


class EpisodeRunner:
    """Runs `config.steps` steps of search on `task` with `policy`, executing in `executor`."""

    def __init__(self, task: Task, policy: Any, executor: Any, config: EpisodeConfig, run_dir: str | Path,
                 *, ideas: tuple[str, ...] = (), policy_name: str = "",
                 on_step: Callable[[StepOutcome], None] | None = None):
        self.task = task
        self.policy = policy
        self.executor = executor
        self.config = config
        self.run_dir = Path(run_dir)
        self.ideas = tuple(ideas)
        self.policy_name = policy_name or getattr(policy, "model", type(policy).__name__)
        self.on_step = on_step
        self.rewards = RewardContext(task, config.reward, config.feedback)
        self.limits = RunLimits.of(None, task.spec.limits, timeout_s=config.run_timeout_s)

    # --- persistence ---

    def _config_record(self) -> dict[str, Any]:
        from mleforge.sandbox.factory import describe_isolation

        # How this session's scripts were isolated (not compared on resume: a resumed
        # run may well have another bwrap).
        return {"task_id": self.task.id, "policy": self.policy_name, "ideas": list(self.ideas),
                "episode": self.config.to_dict(), "isolation": describe_isolation(self.executor)}

    def _load_or_start(self) -> Journal:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        config_path = self.run_dir / "config.json"
        record = self._config_record()
        if config_path.is_file():
            saved = json.loads(config_path.read_text())
            same = {k: saved.get(k) for k in ("task_id", "policy", "ideas")} == {
                k: record[k] for k in ("task_id", "policy", "ideas")}
            saved_feedback = saved["episode"].get("feedback", "public")
            if not same or saved["episode"]["seed"] != self.config.seed or saved_feedback != self.config.feedback:
                raise ConfigError(
                    f"{self.run_dir} holds a different run ({saved.get('task_id')}, {saved.get('policy')}, "
                    f"seed {saved['episode']['seed']}, feedback {saved_feedback}); use another run directory"
                )
        _atomic_write(config_path, json.dumps(record, indent=2, sort_keys=True))
        journal_path = self.run_dir / "journal.json"
        if journal_path.is_file():
            return Journal.load(journal_path)
        return Journal(self.task.id, self.task.spec.direction)

    def _save_step(self, journal: Journal, outcome: StepOutcome) -> None:
        node_dir = self.run_dir / "nodes" / outcome.node.id
        node_dir.mkdir(parents=True, exist_ok=True)
        (node_dir / "script.py").write_text(outcome.node.code, encoding="utf-8")
        line = {
            "step": outcome.node.step, "node_id": outcome.node.id, "stage": outcome.state.stage,
            "state_id": outcome.state.state_id, "outcome": outcome.node.outcome, "score": outcome.node.score,
            "valid": outcome.node.valid, "reward": outcome.reward.to_dict(),
            "wall_s": None if outcome.result is None else outcome.result.wall_s,
            "tokens": outcome.node.metadata.get("completion_tokens"),
            "prompt_tokens": outcome.node.metadata.get("prompt_tokens"),
            "latency_s": outcome.node.metadata.get("latency_s"),
        }
        # The journal is the source of truth; steps.jsonl is its log. A crash between the
        # two writes loses at most this log line, never a step.
        journal.save(self.run_dir / "journal.json")
        with open(self.run_dir / "steps.jsonl", "a", encoding="utf-8") as f:
            f.write(json.dumps(line) + "\n")

    # --- the loop ---

    def step(self, journal: Journal) -> tuple[Journal, StepOutcome]:
        """One step: choose the state, ask the policy, run, grade, reward, save."""
        from mleforge.policies.base import SamplingConfig

        index = len(journal)
        rng = np.random.default_rng([self.config.seed, index])
        state = next_state(journal, self.config.search, rng, self.ideas)
        messages = render_prompt(state, self.task, self.config.prompt)
        sampling = SamplingConfig(temperature=self.config.temperature,
                                  max_new_tokens=self.config.max_new_tokens,
                                  seed=self.config.seed * 100_003 + index)
        (completion,) = self.policy.generate([messages], n=1, sampling=sampling, states=[state])[0]
        metadata = {"policy": self.policy_name, "prompt_tokens": completion.prompt_tokens,
                    "completion_tokens": completion.completion_tokens, "latency_s": completion.latency_s}
        node_id = node_id_for(state, completion.text, salt=f"seed={self.config.seed}")
        outcome = run_step(state, completion.text, self.task, self.executor, self.rewards,
                           limits=self.limits, node_id=node_id, metadata=metadata,
                           keep_submission=self.run_dir / "nodes" / node_id / "submission.csv")
        journal = journal.add(outcome.node)
        self._save_step(journal, outcome)
        if self.on_step is not None:
            self.on_step(outcome)
        return journal, outcome

    def run(self) -> EpisodeResult:
        journal = self._load_or_start()
        start = time.monotonic()
        stopped_by = "steps"
        while len(journal) < self.config.steps:
            if self.config.time_limit_s is not None and time.monotonic() - start >= self.config.time_limit_s:
                stopped_by = "time_limit"
                break
            journal, _ = self.step(journal)
        return self._finish(journal, time.monotonic() - start, stopped_by)

    def _finish(self, journal: Journal, wall_s: float, stopped_by: str) -> EpisodeResult:
        best = journal.best_node()
        report = None
        if best is not None:
            path = self.run_dir / "nodes" / best.id / "submission.csv"
            # The only private grade of the run, after its last step.
            report = grade(self.task, path, part="private", feedback=self.config.feedback)
        first_valid = next((i + 1 for i, n in enumerate(journal.nodes) if n.valid), None)
        result = EpisodeResult(
            task_id=self.task.id, run_dir=str(self.run_dir), steps=len(journal),
            best_node_id=None if best is None else best.id, report=report,
            steps_to_first_valid=first_valid, wall_s=round(wall_s, 3),
            completion_tokens=sum(int(n.metadata.get("completion_tokens") or 0) for n in journal.nodes),
            prompt_tokens=sum(int(n.metadata.get("prompt_tokens") or 0) for n in journal.nodes),
            stopped_by=stopped_by, feedback=self.config.feedback,
        )
        _atomic_write(self.run_dir / "result.json", json.dumps(result.to_dict(), indent=2))
        return result
