"""The prompts' budgets and switches: `PromptConfig`, with its two profiles (`full`, the
default, and `compact`, `PromptConfig.compact()`; see `mleforge.agent.prompts`)."""

from __future__ import annotations

from dataclasses import dataclass

from mleforge.errors import ConfigError

PROFILES = ("full", "compact")
# The compact profile's script budget, in characters: with model-building bodies elided last, the
# smallest budget at which the template expert's short edits (expert/short.py) on the lite tasks'
# journals stay on shown lines as often as with a larger one (`python benchmarks/prompt_tokens.py`
# sweeps the budget against prompt tokens and the edits it shows).
COMPACT_CODE_CHARS = 2800


@dataclass(frozen=True)
class PromptConfig:
    """Budgets and switches of the prompts. Character budgets bound what one prompt
    can grow to, whatever a script printed."""

    output_head_chars: int = 2000  # of each of stdout and stderr, shown head + tail
    output_tail_chars: int = 4000  # the tail gets more: tracebacks and final scores are there
    memory_nodes: int = 8  # the most recent earlier attempts summarized
    memory_plan_chars: int = 300
    memory_error_chars: int = 300
    overview_columns: int = 12  # per file, id and target columns first; the rest are listed by type
    overview_values: int = 3  # example values per column
    overview_value_chars: int = 40
    overview_sample_rows: int = 500  # rows read to infer types and examples
    overview_files: int = 30  # entries listed of the input folder
    allow_edits: bool = True  # offer SEARCH/REPLACE edits (format B) in debug and improve
    # Show earlier attempts' public scores (Kaggle's public leaderboard: a part of the test
    # set, never the private part the final grade is on). A node of a run with feedback
    # "none" has no score to show.
    show_scores: bool = True
    packages: tuple[str, ...] = ("numpy", "pandas", "scikit-learn", "scipy")
    profile: str = "full"  # "full" | "compact" (see the module doc; `PromptConfig.compact()` is its preset)
    code_chars: int = 0  # the target script shown is cut to about this (script_view); 0: whole
    format_chars: int = 500  # compact: the description's submission-format section, cut to this
    # Leave the script's bookkeeping comments (the template expert's `# template-spec:` header)
    # out of the target script shown: short edits do not touch them (agent.actions).
    hide_bookkeeping: bool = False

    def __post_init__(self) -> None:
        if self.profile not in PROFILES:
            raise ConfigError(f"prompt.profile: got {self.profile!r}; expected one of {', '.join(PROFILES)}")
        for key in (
            "output_head_chars", "output_tail_chars", "memory_nodes", "memory_plan_chars",
            "memory_error_chars", "overview_columns", "overview_values", "overview_value_chars",
            "code_chars", "format_chars",
        ):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ConfigError(f"prompt.{key}: got {value!r}; expected an integer >= 0")
        for key in ("overview_sample_rows", "overview_files"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"prompt.{key}: got {value!r}; expected an integer >= 1")
        object.__setattr__(self, "packages", tuple(self.packages))
        if not self.packages or not all(isinstance(p, str) and p for p in self.packages):
            raise ConfigError(f"prompt.packages: got {self.packages!r}; expected package names")

    @classmethod
    def compact(cls, **overrides: object) -> PromptConfig:
        """The compact profile with its budgets (measured with Qwen2.5-Coder's tokenizer on the
        lite tasks by benchmarks/prompt_tokens.py); `overrides` change any field."""
        preset: dict[str, object] = {
            "profile": "compact", "memory_nodes": 0, "output_head_chars": 150, "output_tail_chars": 350,
            "overview_columns": 6, "overview_values": 2, "overview_value_chars": 24, "memory_plan_chars": 200,
            "code_chars": COMPACT_CODE_CHARS, "hide_bookkeeping": True,
        }
        return cls(**{**preset, **overrides})  # type: ignore[arg-type]

    @classmethod
    def for_profile(cls, profile: str, **overrides: object) -> PromptConfig:
        """`full` (the defaults) or `compact` (its preset), with `overrides`."""
        if profile not in PROFILES:
            raise ConfigError(f"prompt profile: got {profile!r}; expected one of {', '.join(PROFILES)}")
        return cls.compact(**overrides) if profile == "compact" else cls(**overrides)  # type: ignore[arg-type]
