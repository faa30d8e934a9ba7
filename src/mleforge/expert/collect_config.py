"""What `mleforge collect` collects: CollectConfig, its settings' checks and the constants of
a collect folder's layout (mleforge.expert.collect runs it)."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from mleforge import config as check
from mleforge.agent.prompt_config import PROFILES, PromptConfig
from mleforge.agent.runner import EpisodeConfig
from mleforge.agent.search import SearchConfig
from mleforge.errors import ConfigError
from mleforge.sandbox.config import ISOLATION_HELP, ISOLATIONS

SUMMARY_FILE = "collect.json"
SAMPLES_FILE = "samples.jsonl"
JOURNALS_DIR = "journals"
TEACHERS = ("template", "openai")
IDEA_SOURCES = ("catalog", "teacher")
EMBEDDERS = ("auto", "minilm", "tfidf")
MAX_EPISODES = 1000  # per task and seed: an episode's seed is seed * MAX_EPISODES + episode
# The settings that decide what an episode does: a folder made with other values is not resumed.
EPISODE_FIELDS = ("teacher", "steps", "drafts", "debug_prob", "ideas_low", "ideas_high", "idea_pool",
                  "idea_source", "embedder", "max_new_tokens", "temperature", "run_timeout_s")
# The compact profile's completion budget for debug and improve samples, in characters. The
# CPU preset generates at most a few hundred tokens; edit blocks of code take about 3 characters
# a Qwen2.5-Coder token (benchmarks/collect_tokens.py measures the samples with its tokenizer).
COMPACT_COMPLETION_CHARS = 720


@dataclass(frozen=True)
class CollectConfig:
    """What to collect. `tasks`: a registry selector (`lite`, `all`, ids separated by commas).
    The grid is tasks x seeds (first_seed ...) x episodes; `workers` episodes run at once
    (None: half the CPUs). `ideas_low`..`ideas_high` ideas of the task's `idea_pool` most
    diverse go into each episode's first prompt (ideas_high 0: none). `prompt_profile` renders the
    samples' prompts; `code_chars` overrides that profile's script budget. `completion_chars`:
    the budget of a debug or improve sample's completion (None: the profile's, compact
    COMPACT_COMPLETION_CHARS, full none; 0: none): the template expert answers within it
    (expert/short.py) and a sample over it is left out and counted, never cut."""

    tasks: str = field(default="lite", metadata={"help": "lite | all | id,id,..."})
    teacher: str = field(default="template", metadata={"help": "template (offline) | openai:<model>"})
    episodes: int = field(default=2, metadata={"help": "episodes per task and seed"})
    seeds: int = field(default=1, metadata={"help": "seeds per task"})
    first_seed: int = field(default=0, metadata={"help": "the first seed"})
    steps: int = field(default=6, metadata={"help": "steps per episode"})
    drafts: int = field(default=2, metadata={"help": "drafts before debugging/improving"})
    debug_prob: float = field(default=0.5, metadata={"help": "chance a step debugs a failed node"})
    ideas_low: int = field(default=1, metadata={"help": "at least this many ideas in an episode's first prompt"})
    ideas_high: int = field(default=3, metadata={"help": "at most this many ideas (0: none)"})
    idea_pool: int = field(default=10, metadata={"help": "the task's ideas the most diverse are drawn from"})
    idea_source: str = field(default="catalog", metadata={
        "choices": IDEA_SOURCES, "help": "the idea pool: the template's catalog, or ideas the teacher writes"})
    embedder: str = field(default="auto", metadata={
        "choices": EMBEDDERS, "help": "idea diversity measured with MiniLM (when installed) or TF-IDF"})
    max_new_tokens: int = field(default=2048, metadata={"help": "the teacher's completion cap"})
    temperature: float = field(default=0.7, metadata={"help": "the teacher's sampling temperature"})
    run_timeout_s: float | None = field(default=None, metadata={
        "help": "per-execution limit in seconds (none: the task's)"})
    workers: int | None = field(default=None, metadata={"help": "episodes at once (none: half the CPUs)"})
    executor: str = field(default="local", metadata={"help": "sandbox backend"})
    isolation: str | None = field(default=None, metadata={"choices": ISOLATIONS, "help": ISOLATION_HELP})
    prompt_profile: str = field(default="full", metadata={
        "choices": PROFILES, "help": "how the samples' prompts are rendered (compact for the CPU preset)"})
    code_chars: int | None = field(default=None, metadata={
        "help": "the target script's budget in the samples' prompts (none: the profile's)"})
    completion_chars: int | None = field(default=None, metadata={
        "help": "a debug or improve sample's completion budget in characters (none: the profile's; 0: none)"})
    keep_failures: bool = field(default=False, metadata={
        "help": "also keep steps that did not produce a valid submission"})
    keep_hidden_edits: bool = field(default=False, metadata={
        "help": "also keep edits of lines the prompt's view of the script hides"})

    def __post_init__(self) -> None:
        check.text("collect.tasks", self.tasks, "give lite, all, or task ids separated by commas")
        if self.teacher.partition(":")[0] not in TEACHERS or (
                self.teacher.startswith("openai") and not self.teacher.partition(":")[2]):
            raise ConfigError(f"collect.teacher: got {self.teacher!r}; expected template or openai:<model>")
        for key, low in (("episodes", 1), ("seeds", 1), ("first_seed", 0), ("steps", 1), ("drafts", 1),
                         ("ideas_low", 0), ("ideas_high", 0), ("idea_pool", 1), ("max_new_tokens", 1)):
            check.integer(f"collect.{key}", getattr(self, key), low)
        if self.episodes > MAX_EPISODES:
            raise ConfigError(f"collect.episodes: got {self.episodes}; at most {MAX_EPISODES} per task and seed")
        if 0 < self.ideas_high < self.ideas_low:  # ideas_high 0: no ideas at all
            raise ConfigError(f"collect.ideas_high ({self.ideas_high}) must be >= ideas_low ({self.ideas_low}), "
                              "or 0 for no ideas")
        check.choice("collect.idea_source", self.idea_source, IDEA_SOURCES)
        check.choice("collect.embedder", self.embedder, EMBEDDERS)
        check.choice("collect.prompt_profile", self.prompt_profile, PROFILES)
        check.choice("collect.isolation", self.isolation, ISOLATIONS, optional=True)
        check.integer("collect.workers", self.workers, 1, " (None: half the CPUs)", optional=True)
        check.integer("collect.code_chars", self.code_chars, 0, " (0: the whole script)", optional=True)
        check.integer("collect.completion_chars", self.completion_chars, 0,
                      " (0: no budget; unset: the prompt profile's)", optional=True)
        check.flag("collect.keep_failures", self.keep_failures)
        check.flag("collect.keep_hidden_edits", self.keep_hidden_edits)
        self.episode_config(0)  # validates the episode settings now, not at the first episode

    def episode_config(self, seed: int) -> EpisodeConfig:
        return EpisodeConfig(steps=self.steps, run_timeout_s=self.run_timeout_s, seed=seed,
                             search=SearchConfig(num_drafts=self.drafts, debug_prob=self.debug_prob),
                             max_new_tokens=self.max_new_tokens, temperature=self.temperature)

    @property
    def prompt_config(self) -> PromptConfig:
        overrides = {} if self.code_chars is None else {"code_chars": self.code_chars}
        return PromptConfig.for_profile(self.prompt_profile, **overrides)

    @property
    def completion_budget(self) -> int:
        """The debug and improve samples' completion budget in characters; 0: none."""
        if self.completion_chars is not None:
            return self.completion_chars
        return COMPACT_COMPLETION_CHARS if self.prompt_profile == "compact" else 0

    @property
    def resolved_workers(self) -> int:
        if self.workers is not None:
            return self.workers
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        return max(1, cpus // 2)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CollectConfig:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(f"unknown collect setting(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        return cls(**data)
