"""The compact prompt profile (`PromptConfig.compact()`): for the CPU training preset, where
prefill dominates a step. The goal, metric and submission format instead of the
description, a trimmed data overview, no memory of other nodes, and a view of the target
script within `code_chars` (`mleforge.agent.elision`)."""

from __future__ import annotations

import re

from mleforge.agent.elision import target_view
from mleforge.agent.execution import collapse_repeats, trim_head_tail
from mleforge.agent.overview import compact_overview
from mleforge.agent.prompt_config import PromptConfig
from mleforge.agent.prompt_text import (
    INPUT_DIR,
    SUBMISSION_PATH,
    Messages,
    duration,
    fence,
    ideas_section,
    one_line,
    score_shown,
    score_text,
)
from mleforge.agent.state import State
from mleforge.tasks.task import Task

_PROBLEM_PHRASES = {
    "binary": "binary classification", "multiclass": "multiclass classification", "regression": "regression",
    "ordinal": "ordinal classification", "ranking": "ranking",
}
_FORMAT_HEADING_RE = re.compile(r"^#{1,6}\s*submission\b.*$", re.IGNORECASE | re.MULTILINE)
_HEADING_RE = re.compile(r"^#{1,6}\s", re.MULTILINE)
_FENCED_RE = re.compile(r"^(`{3,}|~{3,}).*?^\1[ \t]*$", re.MULTILINE | re.DOTALL)


def _format_section(task: Task, config: PromptConfig) -> str:
    """The description's submission-format section in prose (its example is left out: the
    data overview shows sample_submission.csv), or a sentence made from the spec."""
    text = task.description()
    heading = _FORMAT_HEADING_RE.search(text)
    if heading is not None:
        rest = text[heading.end():]
        following = _HEADING_RE.search(rest)
        body = _FENCED_RE.sub("", rest[: following.start()] if following else rest)
        prose = one_line(body, config.format_chars).rstrip(":")
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


def _compact_instructions(task: Task, config: PromptConfig) -> str:
    limits = task.spec.limits
    return "\n".join([
        f"Rules: read the data from `{INPUT_DIR}`; write `{SUBMISSION_PATH}` (only it is graded); "
        f"finish within {duration(limits.timeout_s)} on {limits.cpus} CPU cores and {limits.memory_mb} MB; "
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


def _compact_target(state: State, task: Task, config: PromptConfig, title: str) -> str:
    node = state.target
    if node is None or node.execution is None:
        raise ValueError(f"a {state.stage} prompt needs a target node that ran")
    score = f" (public score {score_text(node.score)})" if score_shown(node, config) else ""
    view = target_view(state, config)
    ex = node.execution
    status = "timed out" if ex.timed_out else (
        f"killed by the {ex.killed_by} limit" if ex.killed_by else f"exit code {ex.returncode}")
    lines = [f"# {title}{score}", fence(view.text, "python"),
             f"Output: {status}; submission written: {'yes' if ex.submission_written else 'no'}"]
    if node.error:
        lines.append(f"Why it did not produce a valid submission: {node.error}")
    for name, stream in (("stdout", ex.stdout), ("stderr", ex.stderr)):
        shown = trim_head_tail(collapse_repeats(stream), config.output_head_chars, config.output_tail_chars)
        if shown.strip():
            lines += [f"{name}:", fence(shown)]
    return "\n".join(lines)


def compact_messages(state: State, task: Task, config: PromptConfig) -> Messages:
    stage = state.stage
    sections: list[str | None] = [_compact_task(task, config), compact_overview(task, config), ideas_section(state)]
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
