"""The step-wise evaluation's settings (mleforge.eval.stepwise runs it): StepwiseConfig, what a
training run makes of its model, and StepwiseStatesConfig, `mleforge eval --stepwise`'s own.

A fixed set of states of the eval tasks, drawn with the run's seed from expert journals of those
tasks, one completion each: before training, after the warm start (after_sft) and after.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mleforge import config as check
from mleforge.agent.prompt_config import PROFILES
from mleforge.errors import ConfigError
from mleforge.policies.engines.base import ENGINE_CHOICES, QUANTIZATIONS


@dataclass(frozen=True)
class StepwiseConfig:
    """expert_steps is the eval tasks' expert episode length of its own, so that a shorter
    training-side expert_steps leaves the evaluation's states as they are."""

    enabled: bool = field(default=True, metadata={
        "help": "the step-wise evaluation on the eval tasks before and after training"})
    after_sft: bool = field(default=False, metadata={
        "aliases": ("--eval-after-sft",),
        "help": "also evaluate the warm start's model on the same states, between before and after "
                "(off on the cpu preset, where it costs minutes; on for gpu-1x)"})
    states: int = field(default=8, metadata={
        "aliases": ("--stepwise-states",), "help": "states of the evaluation before and after"})
    expert_steps: int = field(default=6, metadata={
        "aliases": ("--stepwise-expert-steps",),
        "help": "steps of each template-expert episode of the eval tasks (the evaluation's states)"})
    temperature: float = field(default=0.7, metadata={"help": "sampling temperature of its completions"})
    engine: str = field(default="auto", metadata={
        "choices": ENGINE_CHOICES, "aliases": ("--engine",),
        "help": "what generates: ct2 (CTranslate2; pip install 'mleforge[fast]'), transformers, or auto "
                "(ct2 where it is installed and converts the model)"})
    quantization: str | None = field(default=None, metadata={
        "choices": QUANTIZATIONS, "aliases": ("--quantization",),
        "help": "the ct2 engine's weight type (none: int8 on a CPU, float16 on a GPU)"})

    def __post_init__(self) -> None:
        check.flag("stepwise.enabled", self.enabled)
        check.flag("stepwise.after_sft", self.after_sft)
        check.integer("stepwise.states", self.states, 1)
        check.integer("stepwise.expert_steps", self.expert_steps, 1)
        check.number("stepwise.temperature", self.temperature, low=0.0, strict=True)
        check.choice("stepwise.engine", self.engine, ENGINE_CHOICES)
        check.choice("stepwise.quantization", self.quantization, QUANTIZATIONS, optional=True)
        if self.quantization is not None and self.engine == "transformers":
            raise ConfigError("stepwise.quantization applies to the ct2 engine; drop it or use engine ct2 (or auto)")


@dataclass(frozen=True)
class StepwiseStatesConfig:
    """`mleforge eval --stepwise`'s own settings: which fixed expert states it evaluates and how
    their prompts are rendered (the policy, tasks and sampling are the eval command's)."""

    states: int = field(default=24, metadata={"help": "states evaluated"})
    state_seed: int = field(default=0, metadata={"help": "seed of the state draw and of sampling"})
    journals: str | None = field(default=None, metadata={
        "help": "expert journals to draw states from (none: made with the template expert in OUT/expert, once)"})
    expert_steps: int = field(default=6, metadata={"help": "steps of each expert episode made"})
    stages: tuple[str, ...] = field(default=("draft", "debug", "improve"), metadata={
        "help": "stages of the states (comma-separated)"})
    prompt_profile: str = field(default="full", metadata={
        "choices": PROFILES, "help": "prompt profile (compact for the CPU preset)"})

    def __post_init__(self) -> None:
        check.integer("stepwise.states", self.states, 1)
        check.integer("stepwise.state_seed", self.state_seed, 0)
        check.text("stepwise.journals", self.journals, "give a folder of expert journals, or null", optional=True)
        check.integer("stepwise.expert_steps", self.expert_steps, 1)
        object.__setattr__(self, "stages", tuple(self.stages))
        check.choice("stepwise.prompt_profile", self.prompt_profile, PROFILES)
