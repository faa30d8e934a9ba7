"""Rendering a State into chat messages: one function per stage (draft, debug, improve).

A prompt is a pure function of (state, task, config): no clocks, no
randomness, no wall times, so the state's content hash identifies its prompt
and prompt caches hit. The system message holds what is the same for every
state of a stage and task (role, instructions, response format): servers that
cache prompt prefixes reuse it. The user message holds the task, its data and
the state.

Two profiles. `full` (the default) shows the whole task description, a
detailed data overview, the memory of earlier attempts and the whole target
script. `compact` (`PromptConfig.compact()`, for the CPU training preset,
where prefill dominates a step) shows the goal, metric and submission format
instead of the description, a trimmed data overview, no memory of other
nodes, and a view of the target script within `code_chars`: function bodies
are elided, least relevant first, and every line it does show is a real line
of the script, so a SEARCH block copied from it matches (`script_view`).
"""

from __future__ import annotations

import ast
import os
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import pandas as pd

from mleforge.agent.actions import bookkeeping_lines
from mleforge.agent.execution import ExecutionSummary, collapse_repeats, trim_head_tail
from mleforge.agent.journal import Journal
from mleforge.agent.node import Node
from mleforge.agent.state import State
from mleforge.errors import ConfigError
from mleforge.tasks.preparation import require_prepared
from mleforge.tasks.task import Task

# The workspace layout a script runs in (the sandbox builds it).
INPUT_DIR = "./input/"
SUBMISSION_PATH = "./submission/submission.csv"
WORKING_DIR = "./working/"
OVERVIEW_FILES = ("train.csv", "test.csv", "sample_submission.csv")
PROFILES = ("full", "compact")
# The compact profile's script budget (~750 Qwen2.5-Coder tokens). With model-building bodies elided
# last, 123 of 128 of the template expert's short edits (expert/short.py) on the lite tasks' journals
# stay on shown lines at 2,800 chars as at 4,000 (at 2,400: 13); benchmarks/prompt_tokens.py.
COMPACT_CODE_CHARS = 2800

Messages = list[dict[str, str]]


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


# --- small formatting helpers ---


def _fence(text: str, lang: str = "") -> str:
    """`text` in a Markdown fence longer than any run of backticks inside it, so
    a script or an output containing ``` cannot end the block early."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    ticks = "`" * max(3, longest + 1)
    return f"{ticks}{lang}\n{text.rstrip(chr(10))}\n{ticks}"


def _one_line(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: max(0, limit - 3)] + "..."


def _number(x: float) -> str:
    return repr(round(float(x), 5))


def _size(n: int) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"  # unreachable; keeps type checkers content


def _duration(seconds: float) -> str:
    if seconds >= 60 and seconds % 60 == 0:
        minutes = int(seconds // 60)
        return f"{minutes} minute{'s' if minutes != 1 else ''}"
    return f"{seconds:g} seconds"


# --- the data overview, computed once per prepared task ---


def data_overview(task: Task, config: PromptConfig | None = None) -> str:
    """The public files (names, sizes) and, for train, test and sample submission,
    rows, columns, types and a few values. Cached per task folder and file state."""
    return _overview(*_overview_key(task), config or PromptConfig())


def _overview_key(task: Task) -> tuple[str, tuple, tuple[str, ...]]:
    """What an overview is cached by: the public folder, its files' state, and the columns
    always described (id and target), however wide the table."""
    require_prepared(task)
    public = task.public_dir
    signature = tuple(
        sorted((e.name, e.is_dir(), e.stat().st_size, e.stat().st_mtime_ns) for e in os.scandir(public))
    )
    fmt = task.spec.submission
    key_columns = tuple(dict.fromkeys(c for c in (fmt.id_column, task.spec.target, *fmt.target_columns) if c))
    return str(public), signature, key_columns


@lru_cache(maxsize=64)
def _overview(public: str, signature: tuple, key_columns: tuple[str, ...], config: PromptConfig) -> str:
    root = Path(public)
    lines = [f"Files in {INPUT_DIR}:"]
    entries = sorted(signature)
    for name, is_dir, size, _ in entries[: config.overview_files]:
        if is_dir:
            count = sum(1 for _ in os.scandir(root / name))
            lines.append(f"  {name}/  ({count} entries)")
        else:
            lines.append(f"  {name}  ({_size(size)})")
    if len(entries) > config.overview_files:
        lines.append(f"  ... and {len(entries) - config.overview_files} more")
    for name in OVERVIEW_FILES:
        if (root / name).is_file():
            lines += ["", *_csv_overview(root / name, key_columns, config)]
    return "\n".join(lines)


def _csv_overview(path: Path, key_columns: tuple[str, ...], config: PromptConfig) -> list[str]:
    sample = pd.read_csv(path, nrows=config.overview_sample_rows)
    # One column is enough to count rows, and quoted newlines in text fields are handled.
    rows = len(pd.read_csv(path, usecols=[0])) if len(sample) == config.overview_sample_rows else len(sample)
    lines = [
        f"{path.name}: {rows} rows x {sample.shape[1]} columns "
        f"(types and examples from the first {min(rows, config.overview_sample_rows)} rows)"
    ]
    columns = [str(c) for c in sample.columns]
    keys = [c for c in columns if c in key_columns]
    others = [c for c in columns if c not in key_columns]
    chosen = set(keys[: config.overview_columns]) | set(others[: max(0, config.overview_columns - len(keys))])
    shown = [c for c in columns if c in chosen]
    width = max((len(c) for c in shown), default=0)
    for column, series in zip(columns, (sample[c] for c in sample.columns)):
        if column not in chosen:
            continue
        values = series.dropna().unique()[: config.overview_values]
        examples = ", ".join(_value(v, config.overview_value_chars) for v in values)
        missing = int(series.isna().sum())
        note = f"  ({missing} missing)" if missing else ""
        lines.append(f"  {column:<{width}}  {series.dtype}  e.g. {examples or '-'}{note}")
    rest = [i for i, c in enumerate(columns) if c not in chosen]
    if rest:
        kinds = sample.iloc[:, rest].dtypes.astype(str).value_counts().sort_index()
        summary = ", ".join(f"{n} {kind}" for kind, n in kinds.items())
        names = [columns[i] for i in rest]
        listed = ", ".join(names) if len(names) <= 4 else f"{', '.join(names[:3])}, ..., {names[-1]}"
        lines.append(f"  ... and {len(rest)} more columns ({summary}): {listed}")
    return lines


def _value(value: object, limit: int) -> str:
    if isinstance(value, str):
        text = value if len(value) <= limit else value[: max(0, limit - 3)] + "..."
        return repr(text)
    if hasattr(value, "item"):  # numpy scalars print as Python ones
        value = value.item()
    return repr(value)


# --- sections rendered from the state ---


def _instructions(task: Task, config: PromptConfig) -> str:
    spec = task.spec
    fmt = spec.submission
    better = "lower" if task.is_lower_better else "higher"
    limits = spec.limits
    packages = ", ".join(config.packages)
    return "\n".join([
        "Instructions:",
        f"- The data is in `{INPUT_DIR}` (read-only): train.csv, test.csv, sample_submission.csv "
        "and description.md.",
        f"- Write a prediction for every row of test.csv to `{SUBMISSION_PATH}`, with the columns "
        f"of sample_submission.csv ({', '.join(fmt.columns)}). This file is what gets graded; "
        "nothing else counts.",
        f"- Use `{WORKING_DIR}` for any other files you need.",
        f"- The script must finish within {_duration(limits.timeout_s)}, with {limits.memory_mb} MB "
        f"of memory and {limits.cpus} CPU cores; it is stopped at the limit.",
        f"- Hold out part of the training data and print the validation score ({spec.metric_name}, "
        f"{better} is better), so you can judge the model.",
        f"- Use only the installed packages: {packages}. There is no internet access.",
        "- Write one complete, self-contained script: no placeholders, no parts left out, no input().",
    ])


def _response_format(stage: str, config: PromptConfig) -> str:
    text = (
        "Response format: a brief plan in prose (3-5 sentences), then exactly one ```python code "
        "block holding the complete script. Write nothing after the code block."
    )
    if stage != "draft" and config.allow_edits:
        text += (
            "\n\nOr, instead of the complete script, give the plan and then one or more edits of "
            "the current script, each in this form:\n\n"
            "<<<<<<< SEARCH\n(exact lines copied from the current script)\n=======\n"
            "(the lines that replace them)\n>>>>>>> REPLACE\n\n"
            "Each SEARCH must match exactly one place in the script; edits apply in order."
        )
    return text


_ROLES = {
    "draft": (
        "You are an expert machine-learning engineer competing in a Kaggle-style competition. "
        "Plan a solution to the task below and implement it as a single Python script that "
        "trains a model and writes predictions for the test set."
    ),
    "debug": (
        "You are an expert machine-learning engineer competing in a Kaggle-style competition. "
        "Your previous script failed: it crashed, ran out of time, or did not write a valid "
        "submission. Find the cause from its output and fix it."
    ),
    "improve": (
        "You are an expert machine-learning engineer competing in a Kaggle-style competition. "
        "Your previous script works. Propose one specific change that should improve its test "
        "score, small enough that its effect can be measured, and implement it."
    ),
}


def _system(stage: str, task: Task, config: PromptConfig) -> str:
    return "\n\n".join([_ROLES[stage], _instructions(task, config), _response_format(stage, config)])


def _shown(node: Node, config: PromptConfig) -> bool:
    """A node's public score goes into a prompt: valid, scored, and scores shown."""
    return node.valid and node.score is not None and config.show_scores


def _attempt_result(node: Node, config: PromptConfig) -> str:
    if node.valid:
        if config.show_scores and node.score is not None:
            return f"public score {_number(node.score)}"
        return "valid submission"
    return "failed: " + _one_line(_failure(node), config.memory_error_chars)


def _failure(node: Node) -> str:
    """Why a node is not valid, in one phrase."""
    ex = node.execution
    parts = []
    if ex is None:
        parts.append("no parsable action")
    elif ex.timed_out:
        parts.append("timed out")
    elif ex.killed_by is not None:
        parts.append(f"killed ({ex.killed_by})")
    elif ex.returncode not in (0, None):
        parts.append(f"exit code {ex.returncode}")
    if node.error:
        parts.append(node.error)
    elif ex is not None and ex.stderr.strip():
        parts.append(ex.stderr.strip().splitlines()[-1])  # the exception line of a traceback
    elif ex is not None and not ex.submission_written:
        parts.append("no submission written")
    return ": ".join(parts) or "no valid submission"


def _memory(journal: Journal, exclude: str | None, config: PromptConfig) -> str | None:
    earlier = [(i, n) for i, n in enumerate(journal.nodes) if n.id != exclude]
    if not earlier or config.memory_nodes == 0:
        return None
    shown = earlier[-config.memory_nodes:]
    lines = ["Earlier attempts (oldest first):"]
    if len(earlier) > len(shown):
        lines.append(f"({len(earlier) - len(shown)} older attempts not shown)")
    for i, node in shown:
        kind = node.stage
        if node.parent_id is not None:
            kind += f" of attempt {journal.position(node.parent_id) + 1}"
        plan = _one_line(node.plan, config.memory_plan_chars) or "(no plan given)"
        lines.append(f"- Attempt {i + 1} ({kind}): {plan} -> {_attempt_result(node, config)}")
    return "\n".join(lines)


def _execution(ex: ExecutionSummary, node: Node, config: PromptConfig, task: Task) -> str:
    status = []
    if ex.timed_out:
        status.append(f"timed out (the limit is {_duration(task.spec.limits.timeout_s)})")
    if ex.killed_by is not None and not ex.timed_out:
        status.append(f"killed by the {ex.killed_by} limit")
    status.append(f"exit code {ex.returncode}" if ex.returncode is not None else "no exit code")
    status.append(f"submission written: {'yes' if ex.submission_written else 'no'}")
    lines = ["Result: " + "; ".join(status)]
    if node.error:
        lines.append(f"Why it did not produce a valid submission: {node.error}")
    for name, text in (("stdout", ex.stdout), ("stderr", ex.stderr)):
        shown = trim_head_tail(collapse_repeats(text), config.output_head_chars, config.output_tail_chars)
        lines += [f"{name}:", _fence(shown) if shown.strip() else "(empty)"]
    return "\n".join(lines)


def _user(state: State, task: Task, config: PromptConfig, sections: list[str | None]) -> str:
    head = [
        "# Task\n\n" + task.description().strip(),
        "# Data overview\n\n" + data_overview(task, config),
    ]
    return "\n\n".join(s for s in [*head, *sections] if s)


def _ideas(state: State) -> str | None:
    if not state.ideas:
        return None
    return "# Ideas to consider\n\n" + "\n".join(f"- {idea}" for idea in state.ideas)


def _target(state: State, task: Task, config: PromptConfig, title: str) -> str:
    node = state.target
    if node is None or node.execution is None:  # State guarantees both for debug and improve
        raise ValueError(f"a {state.stage} prompt needs a target node that ran")
    number = state.journal.position(node.id) + 1
    score = f", public score {_number(node.score)}" if _shown(node, config) else ""
    return "\n\n".join([
        f"# {title} (attempt {number}{score})",
        "Plan: " + (_one_line(node.plan, config.memory_plan_chars) or "(no plan given)"),
        _fence(target_view(state, config).text, "python"),
        "## What running it showed\n\n" + _execution(node.execution, node, config, task),
    ])


def _check(state: State, task: Task, stage: str) -> None:
    if state.stage != stage:
        raise ValueError(f"a {stage} prompt needs a {stage} state; got a {state.stage} state")
    if state.task_id != task.id:
        raise ValueError(f"the state is of task {state.task_id}, the task is {task.id}")


# --- the compact profile ---

_PROBLEM_PHRASES = {
    "binary": "binary classification", "multiclass": "multiclass classification", "regression": "regression",
    "ordinal": "ordinal classification", "ranking": "ranking",
}
_FORMAT_HEADING_RE = re.compile(r"^#{1,6}\s*submission\b.*$", re.IGNORECASE | re.MULTILINE)
_HEADING_RE = re.compile(r"^#{1,6}\s", re.MULTILINE)
_FENCED_RE = re.compile(r"^(`{3,}|~{3,}).*?^\1[ \t]*$", re.MULTILINE | re.DOTALL)
_TRACE_LINE_RE = re.compile(r'File "[^"]*script\.py", line (\d+)')
# Calls that build a model or its features: the bodies an edit most likely changes (shown longest).
_MODEL_RE = re.compile(
    r"\b\w*(?:Classifier|Regressor|Regression|Pipeline|Vectorizer|Encoder|Scaler|Imputer|Transformer|"
    r"NB|SVC|SVR|PCA|Ridge|Lasso)\(")
# Validation and fitting: changed less often than the model (elided before it, after the rest).
_FIT_RE = re.compile(r"\b\w*KFold\(|\btrain_test_split\(|\.fit\(")


def _format_section(task: Task, config: PromptConfig) -> str:
    """The description's submission-format section in prose (its example is left out: the
    data overview shows sample_submission.csv), or a sentence made from the spec."""
    text = task.description()
    heading = _FORMAT_HEADING_RE.search(text)
    if heading is not None:
        rest = text[heading.end():]
        following = _HEADING_RE.search(rest)
        body = _FENCED_RE.sub("", rest[: following.start()] if following else rest)
        prose = _one_line(body, config.format_chars).rstrip(":")
        if prose:
            return prose
    columns = ", ".join(task.spec.submission.columns)
    return f"a CSV file with a header and one row per row of test.csv, with the columns {columns}"


def _compact_task(task: Task, config: PromptConfig) -> str:
    spec = task.spec
    target = spec.target or ", ".join(spec.submission.target_columns)
    better = "lower" if task.is_lower_better else "higher"
    return "\n".join([
        f"# Task: {spec.name}",
        f"Goal: predict `{target}` for every row of test.csv ({_PROBLEM_PHRASES.get(spec.problem, spec.problem)}, "
        f"{spec.modality} data).",
        f"Metric: {spec.metric_name} ({better} is better).",
        f"Submission ({SUBMISSION_PATH}): {_format_section(task, config)}.",
    ])


def compact_overview(task: Task, config: PromptConfig | None = None) -> str:
    """The trimmed data overview: train.csv's columns (types, a few values), test.csv and
    sample_submission.csv in a line each, and any other input files by name."""
    return _compact_overview(*_overview_key(task), config or PromptConfig.compact())


@lru_cache(maxsize=64)
def _compact_overview(public: str, signature: tuple, key_columns: tuple[str, ...], config: PromptConfig) -> str:
    root = Path(public)
    lines = [f"# Data ({INPUT_DIR})"]
    train_columns: list[str] = []
    if (root / "train.csv").is_file():
        train_lines = _csv_overview(root / "train.csv", key_columns, config)
        train_columns = [str(c) for c in pd.read_csv(root / "train.csv", nrows=0).columns]
        lines += [train_lines[0].split(" (types")[0] + ":", *train_lines[1:]]
    for name in ("test.csv", "sample_submission.csv"):
        path = root / name
        if not path.is_file():
            continue
        head = pd.read_csv(path, nrows=1)
        columns = [str(c) for c in head.columns]
        rows = len(pd.read_csv(path, usecols=[0]))
        if name == "test.csv" and train_columns and set(columns) <= set(train_columns):
            missing = [c for c in train_columns if c not in columns]
            what = f"the columns of train.csv without {', '.join(missing)}" if missing else "the columns of train.csv"
        else:
            example = ",".join(_value(v, config.overview_value_chars).strip("'") for v in head.iloc[0]) \
                if len(head) else ""
            what = f"columns {', '.join(columns)}" + (f" (first row: {example})" if example else "")
        lines.append(f"{name}: {rows} rows; {what}")
    others = [name + ("/" if is_dir else "") for name, is_dir, _, _ in signature
              if name not in (*OVERVIEW_FILES, "description.md")]
    if others:
        shown = ", ".join(others[: config.overview_files])
        more = f" and {len(others) - config.overview_files} more" if len(others) > config.overview_files else ""
        lines.append(f"Other files: {shown}{more}")
    return "\n".join(lines)


def _compact_instructions(task: Task, config: PromptConfig) -> str:
    limits = task.spec.limits
    return "\n".join([
        f"Rules: read the data from `{INPUT_DIR}`; write `{SUBMISSION_PATH}` (only it is graded); "
        f"finish within {_duration(limits.timeout_s)} on {limits.cpus} CPU cores and {limits.memory_mb} MB; "
        f"print a validation score; use only {', '.join(config.packages)}; no internet.",
    ])


def _compact_format(stage: str, config: PromptConfig) -> str:
    if stage == "draft" or not config.allow_edits:
        return ("Answer: a plan of 2-4 sentences, then one ```python block with the complete script. "
                "Nothing after the block.")
    return (
        "Answer: a plan of 1-3 sentences, then one or more edits of the script, each in this form:\n"
        "<<<<<<< SEARCH\n(lines copied exactly from the script)\n=======\n(the lines that replace them)\n"
        ">>>>>>> REPLACE\n"
        "Each SEARCH must match one place; never copy a `# [...]` line, it stands for lines not shown."
    )


_COMPACT_ROLES = {
    "draft": "You are an expert machine-learning engineer. Write one Python script that trains a model "
             "and predicts the test set.",
    "debug": "You are an expert machine-learning engineer. The script below failed. Find the cause in its "
             "output and fix it.",
    "improve": "You are an expert machine-learning engineer. The script below works. Make one change that "
               "should improve its score.",
}


def _compact_system(stage: str, task: Task, config: PromptConfig) -> str:
    return "\n\n".join([_COMPACT_ROLES[stage], _compact_instructions(task, config), _compact_format(stage, config)])


def trace_lines(node: Node) -> frozenset[int]:
    """0-based lines of the script named by its traceback."""
    stderr = node.execution.stderr if node.execution is not None else ""
    return frozenset(int(m) - 1 for m in _TRACE_LINE_RE.findall(stderr))


@dataclass(frozen=True)
class ScriptView:
    """What a prompt shows of a script: `text`, and the 0-based lines of the script it leaves out."""

    text: str
    hidden: frozenset[int]


def script_view(code: str, budget: int, keep: frozenset[int] = frozenset(), *,
                hide_bookkeeping: bool = False) -> ScriptView:
    """`code` cut to about `budget` characters by eliding the bodies of top-level functions
    and classes (after their docstrings), each replaced by one `# [...]` line, until it fits:
    first bodies that build no model, features or validation, then those that validate or
    fit, then those that build the model or its features, the largest first; never a body holding a line of `keep` (the lines a traceback names).
    Module-level code is always shown; a script that does not parse is shown whole.
    budget 0: the whole script. `hide_bookkeeping`: the script's leading bookkeeping comments
    (`agent.actions.BOOKKEEPING_PREFIXES`) are left out, with no marker: the lines shown
    stay one unbroken run from the first shown line, so a SEARCH copied from them matches."""
    skip = bookkeeping_lines(code) if hide_bookkeeping else 0
    if skip:
        lines = code.split("\n")
        view = script_view("\n".join(lines[skip:]), budget, frozenset(k - skip for k in keep if k >= skip))
        return ScriptView(view.text, frozenset(range(skip)) | frozenset(i + skip for i in view.hidden))
    if budget <= 0 or len(code) <= budget:
        return ScriptView(code, frozenset())
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return ScriptView(code, frozenset())
    lines = code.split("\n")
    candidates = []  # (priority, -size, first line, last line, name)
    for node in tree.body:
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) or not node.body:
            continue
        body = node.body
        if isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant) \
                and isinstance(body[0].value.value, str):
            body = body[1:]  # the docstring stays: it says what the elided body does
        if not body:
            continue
        first, last = body[0].lineno - 1, (node.end_lineno or node.lineno) - 1
        if first <= node.lineno - 1 or last - first < 1:  # a one-line def, or too short to gain from
            continue
        if keep & set(range(first, last + 1)):
            continue
        chunk = "\n".join(lines[first:last + 1])
        tier = 2 if _MODEL_RE.search(chunk) else 1 if _FIT_RE.search(chunk) else 0
        candidates.append((tier, -len(chunk), first, last, node.name))
    hidden: set[int] = set()
    elided: dict[int, tuple[int, str]] = {}
    text = code
    for _, _, first, last, name in sorted(candidates):
        if len(text) <= budget:
            break
        elided[first] = (last, name)
        hidden.update(range(first, last + 1))
        text = _render_view(lines, elided)
    return ScriptView(text, frozenset(hidden))


def _render_view(lines: list[str], elided: dict[int, tuple[int, str]]) -> str:
    out: list[str] = []
    i = 0
    while i < len(lines):
        if i in elided:
            last, name = elided[i]
            indent = lines[i][: len(lines[i]) - len(lines[i].lstrip())]
            out.append(f"{indent}# [... {last - i + 1} lines of {name} not shown ...]")
            i = last + 1
            continue
        out.append(lines[i])
        i += 1
    return "\n".join(out)


def target_view(state: State, config: PromptConfig) -> ScriptView:
    """What the prompt of `state` shows of its target script (the whole of it in the full
    profile unless `code_chars` is set)."""
    node = state.target
    if node is None:
        raise ValueError(f"a {state.stage} state has no target script")
    keep = trace_lines(node) if state.stage == "debug" else frozenset()
    return script_view(node.code, config.code_chars, keep, hide_bookkeeping=config.hide_bookkeeping)


def _compact_target(state: State, task: Task, config: PromptConfig, title: str) -> str:
    node = state.target
    if node is None or node.execution is None:
        raise ValueError(f"a {state.stage} prompt needs a target node that ran")
    score = f" (public score {_number(node.score)})" if _shown(node, config) else ""
    view = target_view(state, config)
    ex = node.execution
    status = "timed out" if ex.timed_out else (
        f"killed by the {ex.killed_by} limit" if ex.killed_by else f"exit code {ex.returncode}")
    lines = [f"# {title}{score}", _fence(view.text, "python"),
             f"Output: {status}; submission written: {'yes' if ex.submission_written else 'no'}"]
    if node.error:
        lines.append(f"Why it did not produce a valid submission: {node.error}")
    for name, stream in (("stdout", ex.stdout), ("stderr", ex.stderr)):
        shown = trim_head_tail(collapse_repeats(stream), config.output_head_chars, config.output_tail_chars)
        if shown.strip():
            lines += [f"{name}:", _fence(shown)]
    return "\n".join(lines)


def _compact_messages(state: State, task: Task, config: PromptConfig) -> Messages:
    stage = state.stage
    sections: list[str | None] = [_compact_task(task, config), compact_overview(task, config), _ideas(state)]
    if stage == "draft":
        sections.append("Write your plan and the complete script now.")
    elif stage == "debug":
        sections += [_compact_target(state, task, config, "The script to fix"),
                     "Explain the bug in your plan, then fix it."]
    else:
        sections += [_compact_target(state, task, config, "The script to improve"),
                     "Describe your one improvement in your plan, then implement it."]
    user = "\n\n".join(s for s in sections if s)
    return [{"role": "system", "content": _compact_system(stage, task, config)}, {"role": "user", "content": user}]


# --- one function per stage ---


def draft_messages(state: State, task: Task, config: PromptConfig | None = None) -> Messages:
    config = config or PromptConfig()
    _check(state, task, "draft")
    if config.profile == "compact":
        return _compact_messages(state, task, config)
    user = _user(state, task, config, [
        _memory(state.journal, None, config),
        _ideas(state),
        "Write your plan and the complete script now."
        + (" Take a different approach from the earlier attempts." if len(state.journal) else ""),
    ])
    return [{"role": "system", "content": _system("draft", task, config)}, {"role": "user", "content": user}]


def _edit_messages(state: State, task: Task, config: PromptConfig | None, stage: str, title: str,
                   ask: str) -> Messages:
    """Debug and improve: the same sections around a target script, with their own title and ask."""
    config = config or PromptConfig()
    _check(state, task, stage)
    if config.profile == "compact":
        return _compact_messages(state, task, config)
    user = _user(state, task, config, [
        _memory(state.journal, state.target_node_id, config),
        _ideas(state),
        _target(state, task, config, title),
        ask,
    ])
    return [{"role": "system", "content": _system(stage, task, config)}, {"role": "user", "content": user}]


def debug_messages(state: State, task: Task, config: PromptConfig | None = None) -> Messages:
    return _edit_messages(state, task, config, "debug", "The script to fix", "Explain the bug in your plan, then fix it.")


def improve_messages(state: State, task: Task, config: PromptConfig | None = None) -> Messages:
    return _edit_messages(state, task, config, "improve", "The script to improve",
                          "Describe your one improvement in your plan, then implement it.")


_RENDERERS = {"draft": draft_messages, "debug": debug_messages, "improve": improve_messages}


def render_prompt(state: State, task: Task, config: PromptConfig | None = None) -> Messages:
    """The chat messages for `state`: [system, user]."""
    return _RENDERERS[state.stage](state, task, config)
