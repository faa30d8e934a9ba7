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
of the script, so a SEARCH block copied from it matches.

Here: the full profile's sections and one function per stage. Beside it: the
config (`agent.prompt_config`), the data overview (`agent.overview`), the
script's elision (`agent.elision`), the compact profile (`agent.compact_prompt`)
and the pieces both profiles share (`agent.prompt_text`).
"""

from __future__ import annotations

from mleforge.agent.compact_prompt import compact_messages
from mleforge.agent.elision import target_view
from mleforge.agent.execution import ExecutionSummary, collapse_repeats, trim_head_tail
from mleforge.agent.journal import Journal
from mleforge.agent.node import Node
from mleforge.agent.overview import data_overview
from mleforge.agent.prompt_config import PromptConfig
from mleforge.agent.prompt_text import (
    INPUT_DIR,
    SUBMISSION_PATH,
    WORKING_DIR,
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

# --- the full profile's sections, rendered from the state ---


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
        f"- The script must finish within {duration(limits.timeout_s)}, with {limits.memory_mb} MB "
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


def _attempt_result(node: Node, config: PromptConfig) -> str:
    if node.valid:
        if config.show_scores and node.score is not None:
            return f"public score {score_text(node.score)}"
        return "valid submission"
    return "failed: " + one_line(_failure(node), config.memory_error_chars)


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
        plan = one_line(node.plan, config.memory_plan_chars) or "(no plan given)"
        lines.append(f"- Attempt {i + 1} ({kind}): {plan} -> {_attempt_result(node, config)}")
    return "\n".join(lines)


def _execution(ex: ExecutionSummary, node: Node, config: PromptConfig, task: Task) -> str:
    status = []
    if ex.timed_out:
        status.append(f"timed out (the limit is {duration(task.spec.limits.timeout_s)})")
    if ex.killed_by is not None and not ex.timed_out:
        status.append(f"killed by the {ex.killed_by} limit")
    status.append(f"exit code {ex.returncode}" if ex.returncode is not None else "no exit code")
    status.append(f"submission written: {'yes' if ex.submission_written else 'no'}")
    lines = ["Result: " + "; ".join(status)]
    if node.error:
        lines.append(f"Why it did not produce a valid submission: {node.error}")
    for name, text in (("stdout", ex.stdout), ("stderr", ex.stderr)):
        shown = trim_head_tail(collapse_repeats(text), config.output_head_chars, config.output_tail_chars)
        lines += [f"{name}:", fence(shown) if shown.strip() else "(empty)"]
    return "\n".join(lines)


def _user(state: State, task: Task, config: PromptConfig, sections: list[str | None]) -> str:
    head = [
        "# Task\n\n" + task.description().strip(),
        "# Data overview\n\n" + data_overview(task, config),
    ]
    return "\n\n".join(s for s in [*head, *sections] if s)


def _target(state: State, task: Task, config: PromptConfig, title: str) -> str:
    node = state.target
    if node is None or node.execution is None:  # State guarantees both for debug and improve
        raise ValueError(f"a {state.stage} prompt needs a target node that ran")
    number = state.journal.position(node.id) + 1
    score = f", public score {score_text(node.score)}" if score_shown(node, config) else ""
    return "\n\n".join([
        f"# {title} (attempt {number}{score})",
        "Plan: " + (one_line(node.plan, config.memory_plan_chars) or "(no plan given)"),
        fence(target_view(state, config).text, "python"),
        "## What running it showed\n\n" + _execution(node.execution, node, config, task),
    ])


def _check(state: State, task: Task, stage: str) -> None:
    if state.stage != stage:
        raise ValueError(f"a {stage} prompt needs a {stage} state; got a {state.stage} state")
    if state.task_id != task.id:
        raise ValueError(f"the state is of task {state.task_id}, the task is {task.id}")


# --- one function per stage ---


def draft_messages(state: State, task: Task, config: PromptConfig | None = None) -> Messages:
    config = config or PromptConfig()
    _check(state, task, "draft")
    if config.profile == "compact":
        return compact_messages(state, task, config)
    user = _user(state, task, config, [
        _memory(state.journal, None, config),
        ideas_section(state),
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
        return compact_messages(state, task, config)
    user = _user(state, task, config, [
        _memory(state.journal, state.target_node_id, config),
        ideas_section(state),
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
