"""The renderer the trainer prompts with: a State becomes chat messages, by a PromptConfig.

Prompt rendering stays the agent's (`mleforge.agent.prompts.render_prompt`); training only
chooses its budgets. On a CPU every prompt token is paid three times a step (generation
and the two passes of the update), so the CPU preset uses the compact profile
(`PromptConfig.compact()`): the goal, metric and submission format instead of the whole
description, a trimmed data overview, a short target script, no memory of other attempts
(a fraction of the full prompt's tokens: `python benchmarks/prompt_tokens.py` counts them).
The same PromptConfig renders every prompt of a run: the collected SFT samples, the GRPO
states and the step-wise evaluation, so the warm start, the RL and the measurement see one
format.
"""

from __future__ import annotations

from collections.abc import Callable

from mleforge.agent.prompt_config import PromptConfig
from mleforge.agent.prompt_text import Messages
from mleforge.agent.prompts import render_prompt
from mleforge.agent.state import State
from mleforge.tasks.task import Task

Renderer = Callable[[State, Task], Messages]


def compact_prompt() -> PromptConfig:
    """The compact profile with its budgets. (A bare `PromptConfig(profile="compact")` keeps
    the full profile's output and overview budgets: the preset is `PromptConfig.compact()`.)"""
    return PromptConfig.compact()


def make_renderer(config: PromptConfig) -> Renderer:
    """`render(state, task)` with `config`'s budgets."""

    def render(state: State, task: Task) -> Messages:
        return render_prompt(state, task, config)

    return render
