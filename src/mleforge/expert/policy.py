"""The offline template expert: a scripted policy that writes real, varied solution scripts.

    policy = make_policy("template")                       # or TemplatePolicy(registry)
    [completions] = policy.generate([messages], n=4, states=[state])

It needs no LLM: it reads the structured `State` a prompt was rendered from
(`states=`; required), looks the task up in its `TaskRegistry`, and answers
with a short plan and one ```python block (the format
`mleforge.agent.actions.parse_completion` accepts), chosen stage by stage
(draft.py, debug.py, improve.py) from the catalog (catalog.py) and written by
the script writer (script.py).

Token counts are estimates, about four characters per token, since there is
no tokenizer; `max_new_tokens` and `stop` are not applied, because a script cut
short is worthless as a demonstration (`completion_tokens` tells the caller how
long it is). Importing this module registers the `template` prefix;
`make_policy("template")` imports it on first use.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from mleforge.agent.state import State
from mleforge.errors import MleforgeError
from mleforge.expert.choice import completion_text
from mleforge.expert.debug import debug_choices, short_debug_choices
from mleforge.expert.draft import draft_choices
from mleforge.expert.improve import improve_choices, short_improve_choices
from mleforge.expert.profile import TaskProfile, task_profile
from mleforge.policies.base import (
    Completion,
    PolicyError,
    Prompt,
    SamplingConfig,
    Usage,
    UsageMeter,
    check_request,
)
from mleforge.policies.registry import register_policy
from mleforge.tasks.registry import TaskRegistry

MODEL = "template"
CHARS_PER_TOKEN = 4  # a rough rule for English and code; the template has no tokenizer


def estimate_tokens(chars: int) -> int:
    """Tokens a text of `chars` characters would take, about (see CHARS_PER_TOKEN)."""
    return max(1, math.ceil(chars / CHARS_PER_TOKEN)) if chars else 0


_STAGES = {"draft": draft_choices, "debug": debug_choices, "improve": improve_choices}
# With a completion budget: the short answers (expert/short.py) of the stages that edit a script.
_SHORT = {"debug": short_debug_choices, "improve": short_improve_choices}


class TemplatePolicy:
    """The offline scripted expert (see the module doc). `registry` (or `data_dir`, for a
    registry of its own) finds each state's task; its public train.csv is read for roles."""

    def __init__(self, registry: TaskRegistry | None = None, *, data_dir: str | Path | None = None,
                 sampling: SamplingConfig | None = None, completion_chars: int = 0, view_chars: int = 0):
        for name, value, zero in (("completion_chars", completion_chars, "no budget"),
                                  ("view_chars", view_chars, "any line may be edited")):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise PolicyError(f"template policy: {name} must be an integer >= 0 (0: {zero}); got {value!r}")
        self.registry = registry if registry is not None else TaskRegistry(data_dir=data_dir)
        self.sampling = sampling or SamplingConfig()
        # > 0: debug and improve answers are short actions within this many characters as edits
        # (expert/short.py), for prompts with a completion budget; 0: the long answers.
        self.completion_chars = completion_chars
        self.view_chars = view_chars  # > 0: short edits only of lines a compact view this long shows
        self._meter = UsageMeter()

    @property
    def model(self) -> str:
        return MODEL

    def generate(self, prompts: Sequence[Prompt], n: int = 1, sampling: SamplingConfig | None = None, *,
                 states: Sequence[Any] | None = None) -> list[list[Completion]]:
        messages = check_request(prompts, n)
        if states is None:
            raise PolicyError("the template policy writes scripts from the structured state, not the prompt "
                              "text: pass states=[...] (the State each prompt was rendered from)")
        if len(states) != len(messages):
            raise PolicyError(f"got {len(messages)} prompts but {len(states)} states; give one state per prompt")
        seed = (sampling or self.sampling).seed
        out = []
        for prompt, state in zip(messages, states):
            start = time.perf_counter()
            texts = self.texts(_as_state(state), n, seed)
            latency = time.perf_counter() - start
            prompt_tokens = estimate_tokens(sum(len(m["content"]) for m in prompt))
            completions = [Completion(t, "stop", prompt_tokens, estimate_tokens(len(t)), latency, MODEL)
                           for t in texts]
            self._meter.add(requests=1, completions=n, prompt_tokens=prompt_tokens,
                            completion_tokens=sum(c.completion_tokens for c in completions), latency_s=latency)
            out.append(completions)
        return out

    def texts(self, state: State, n: int, seed: int | None) -> list[str]:
        """The n completion texts for one state."""
        profile = self.profile(state.task_id)
        short = _SHORT.get(state.stage) if self.completion_chars > 0 else None
        # Where no short answer fits (or the target is not the expert's own), the long one.
        choices = short(state, profile, n, seed, self.completion_chars, self.view_chars) if short else []
        choices = choices or _STAGES[state.stage](state, profile, n, seed)
        return [completion_text(choice, profile) for choice in choices]

    def profile(self, task_id: str) -> TaskProfile:
        try:
            task = self.registry.get(task_id)
            return task_profile(task)
        except (MleforgeError, OSError) as exc:
            raise PolicyError(f"template policy: cannot read task {task_id!r}: {exc}") from exc

    def usage(self) -> Usage:
        return self._meter.snapshot()

    def close(self) -> None:
        """Nothing to free: the template holds no threads, servers or models."""


def _as_state(state: Any) -> State:
    if isinstance(state, State):
        return state
    if isinstance(state, Mapping):
        return State.from_dict(state)
    raise PolicyError(f"a state must be a State or its dict form; got {type(state).__name__}")


def _factory(name: str = "", **kwargs: Any) -> TemplatePolicy:
    """`make_policy("template", registry=..., data_dir=..., sampling=..., completion_chars=...)`;
    the name is unused."""
    unknown = sorted(set(kwargs) - {"registry", "data_dir", "sampling", "completion_chars", "view_chars"})
    if unknown:
        raise PolicyError(f"template policy: unknown option(s) {', '.join(unknown)}; "
                          "known: completion_chars, data_dir, registry, sampling, view_chars")
    return TemplatePolicy(**kwargs)


# Importing this module registers it; make_policy("template") imports it on first use.
register_policy("template", _factory)
