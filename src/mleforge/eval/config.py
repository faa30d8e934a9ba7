"""What an evaluation runs: one policy on a suite of tasks, for several seeds, under budgets."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from mleforge.agent.runner import EpisodeConfig
from mleforge.agent.search import SearchConfig
from mleforge.errors import ConfigError
from mleforge.sandbox.config import ISOLATION_HELP, ISOLATIONS

# The settings that decide what a run does: an evaluation folder whose runs were made
# with other values cannot be resumed (more seeds or tasks can be added, though).
RUN_FIELDS = ("policy", "steps", "time_limit_s", "run_timeout_s", "drafts", "max_new_tokens", "temperature",
              "feedback")


@dataclass(frozen=True)
class EvalConfig:
    """An evaluation grid: every task of `tasks` x seeds first_seed .. first_seed + seeds - 1.

    `tasks` is a registry selector: `lite`, `all`, or comma-separated ids (`mlebench:<id>`
    for MLE-bench). `workers` runs (task, seed) episodes concurrently; None means half the
    CPUs, at least one. `policy_options` go to `make_policy` and must be JSON values (the
    template expert's registry is supplied by the runner). `train_runs` name training run
    folders or records whose task sets the contamination guard checks, beside those it
    finds next to an `hf:` checkpoint. `feedback` is the protocol: what each run is shown of
    its own submissions ("public": their public score; "none": execution output only, as in
    MLE-bench); the final grade is always the private one.
    """

    policy: str = field(default="template", metadata={
        "help": "template | openai:<model> | hf:<path> | bundled:smollm2-135m | bundled:qwen2.5-coder-0.5b"})
    tasks: str = field(default="lite", metadata={"help": "lite | all | id,id,... (mlebench:<id> for MLE-bench)"})
    seeds: int = field(default=3, metadata={"help": "seeds per task"})
    first_seed: int = field(default=0, metadata={"help": "the first seed"})
    steps: int = field(default=8, metadata={"help": "steps of search per run"})
    time_limit_s: float | None = field(default=None, metadata={
        "aliases": ("--time-limit",), "help": "wall-time limit of one run, in seconds"})
    run_timeout_s: float | None = field(default=None, metadata={
        "aliases": ("--run-timeout",), "help": "per-execution limit in seconds (none: the task's)"})
    workers: int | None = field(default=None, metadata={
        "help": "runs at once (none: half the CPUs; --stepwise: 2); generation is serialized"})
    drafts: int = field(default=2, metadata={"help": "drafts before debugging/improving"})
    max_new_tokens: int = field(default=2048, metadata={"help": "completion length cap"})
    temperature: float = field(default=0.7, metadata={"help": "sampling temperature"})
    executor: str = field(default="local", metadata={"help": "sandbox backend"})
    isolation: str | None = field(default=None, metadata={"choices": ISOLATIONS, "help": ISOLATION_HELP})
    policy_options: Mapping[str, Any] = field(default_factory=dict, metadata={"flag": False})
    train_runs: tuple[str, ...] = field(default=(), metadata={
        "aliases": ("--trained-on",), "repeat": True,
        "help": "a training run folder or record whose tasks the policy saw (repeatable; contamination guard)"})
    feedback: str = field(default="public", metadata={
        "choices": ("public", "none"),
        "help": "public: each submission's score on the public part of the test answers, in prompts and for the "
                "search's choices; none: execution output only, as in MLE-bench"})

    def __post_init__(self) -> None:
        if not self.policy:
            raise ConfigError("name a policy, as in 'template' or 'bundled:qwen2.5-coder-0.5b'")
        if not self.tasks.strip():
            raise ConfigError("tasks must be lite, all, or comma-separated task ids")
        if self.seeds < 1:
            raise ConfigError(f"seeds must be >= 1; got {self.seeds}")
        if self.first_seed < 0:
            raise ConfigError(f"first_seed must be >= 0; got {self.first_seed}")
        if self.isolation is not None and self.isolation not in ("auto", "bwrap", "none"):
            raise ConfigError(f"isolation must be auto, bwrap or none (or None); got {self.isolation!r}")
        if self.workers is not None and self.workers < 1:
            raise ConfigError(f"workers must be >= 1 (or None for half the CPUs); got {self.workers}")
        try:
            json.dumps(dict(self.policy_options))
        except TypeError as exc:
            raise ConfigError(f"policy_options must be JSON values ({exc}); objects such as a "
                              "registry are supplied by the runner") from None
        # Validate the episode settings now, not at the first run of the grid.
        self.episode(self.first_seed)
        # A copy, so the caller's dict can change without changing this frozen record.
        object.__setattr__(self, "policy_options", dict(self.policy_options))
        object.__setattr__(self, "train_runs", tuple(str(p) for p in self.train_runs))

    @property
    def seed_list(self) -> list[int]:
        return list(range(self.first_seed, self.first_seed + self.seeds))

    @property
    def resolved_workers(self) -> int:
        if self.workers is not None:
            return self.workers
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        return max(1, cpus // 2)

    def episode(self, seed: int) -> EpisodeConfig:
        return EpisodeConfig(
            steps=self.steps, time_limit_s=self.time_limit_s, run_timeout_s=self.run_timeout_s, seed=seed,
            search=SearchConfig(num_drafts=self.drafts), max_new_tokens=self.max_new_tokens,
            temperature=self.temperature, feedback=self.feedback,
        )

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["train_runs"] = list(self.train_runs)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> EvalConfig:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(f"unknown evaluation setting(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        values = dict(data)
        if "train_runs" in values:
            values["train_runs"] = tuple(values["train_runs"])
        return cls(**values)
