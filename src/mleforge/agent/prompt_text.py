"""The pieces every prompt is made of: chat messages, the workspace paths a script sees,
fenced blocks that cannot end early, one-line summaries, numbers, sizes and durations."""

from __future__ import annotations

import re

from mleforge.agent.node import Node
from mleforge.agent.prompt_config import PromptConfig
from mleforge.agent.state import State

# The workspace layout a script runs in (the sandbox builds it).
INPUT_DIR = "./input/"
SUBMISSION_PATH = "./submission/submission.csv"
WORKING_DIR = "./working/"

Messages = list[dict[str, str]]


def fence(text: str, lang: str = "") -> str:
    """`text` in a Markdown fence longer than any run of backticks inside it, so
    a script or an output containing ``` cannot end the block early."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    ticks = "`" * max(3, longest + 1)
    return f"{ticks}{lang}\n{text.rstrip(chr(10))}\n{ticks}"


def one_line(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: max(0, limit - 3)] + "..."


def score_text(x: float) -> str:
    return repr(round(float(x), 5))


def file_size(n: int) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"  # unreachable; keeps type checkers content


def duration(seconds: float) -> str:
    if seconds >= 60 and seconds % 60 == 0:
        minutes = int(seconds // 60)
        return f"{minutes} minute{'s' if minutes != 1 else ''}"
    return f"{seconds:g} seconds"


def value_text(value: object, limit: int) -> str:
    if isinstance(value, str):
        text = value if len(value) <= limit else value[: max(0, limit - 3)] + "..."
        return repr(text)
    if hasattr(value, "item"):  # numpy scalars print as Python ones
        value = value.item()
    return repr(value)


def score_shown(node: Node, config: PromptConfig) -> bool:
    """A node's public score goes into a prompt: valid, scored, and scores shown."""
    return node.valid and node.score is not None and config.show_scores


def ideas_section(state: State) -> str | None:
    if not state.ideas:
        return None
    return "# Ideas to consider\n\n" + "\n".join(f"- {idea}" for idea in state.ideas)
