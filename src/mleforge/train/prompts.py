"""The renderer the trainer prompts with: a State becomes chat messages, by a PromptConfig.

Prompt rendering stays the agent's (`mleforge.agent.prompts.render_prompt`); training only
chooses its budgets. On a CPU every prompt token is paid three times a step (generation
and the two passes of the update), so the CPU preset uses the compact profile: the goal,
metric and submission format instead of the whole description, a trimmed data overview, a
short target script, no memory of other attempts (about 1,000-1,200 tokens where the full
prompt is 3,600 for titanic).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields

from mleforge.agent.prompts import Messages, PromptConfig, render_prompt
from mleforge.agent.state import State
from mleforge.tasks.task import Task

Renderer = Callable[[State, Task], Messages]

# Where `PromptConfig` has no compact profile (an agent package older than it), the
# nearest budgets it has: no memory of other attempts, shorter outputs and overview.
FALLBACK_COMPACT = {
    "memory_nodes": 0, "output_head_chars": 600, "output_tail_chars": 1200, "overview_columns": 8,
    "overview_values": 2, "overview_value_chars": 24, "overview_files": 8,
}


def compact_prompt() -> PromptConfig:
    """The compact profile (`PromptConfig(profile="compact")`) where the agent has it."""
    if "profile" in {f.name for f in fields(PromptConfig)}:
        return PromptConfig(profile="compact")  # type: ignore[call-arg]
    return PromptConfig(**FALLBACK_COMPACT)


def make_renderer(config: PromptConfig) -> Renderer:
    """`render(state, task)` with `config`'s budgets."""

    def render(state: State, task: Task) -> Messages:
        return render_prompt(state, task, config)

    return render
