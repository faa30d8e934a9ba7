"""The step-wise evaluation's settings (mleforge.eval.stepwise runs it): StepwiseConfig, what a
training run makes of its model, and StepwiseStatesConfig, `mleforge eval --stepwise`'s own.

A fixed set of states of the eval tasks with headroom, drawn with the run's seed from expert
journals of those tasks, `samples` completions each (sampling seeds seed, seed + 1, ...):
before training, after the warm start (after_sft) and after, compared paired.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from mleforge import config as check
from mleforge.agent.prompt_config import PROFILES
from mleforge.errors import ConfigError
from mleforge.policies.engines.base import ENGINE_CHOICES, QUANTIZATIONS

HEADROOM_CHOICES = ("require", "prefer", "any")  # mleforge.eval.stepwise.draw_states


@dataclass(frozen=True)
class StepwiseConfig:
    """expert_steps is the eval tasks' expert episode length of its own, so that a shorter
    training-side expert_steps leaves the evaluation's states as they are. LEGACY: what a run
    saved before `samples` and `headroom` existed evaluated with (one completion per state, no
    headroom rule), so that its resumed evaluations pair with the ones it made."""

    LEGACY: ClassVar[dict[str, Any]] = {"samples": 1, "headroom": "any"}

    enabled: bool = field(default=True, metadata={
        "help": "the step-wise evaluation on the eval tasks before and after training"})
    after_sft: bool = field(default=True, metadata={
        "aliases": ("--eval-after-sft",),
        "help": "also evaluate the warm start's model on the same states, between before and after, so "
                "that the warm start's change and GRPO's own are apart"})
    # The cpu preset's size: 6 states x 2 seeds at each of the three evaluations, chosen to keep the
    # main job short (docs/guide/evaluation.md, "Sizing"); gpu-1x evaluates 16 x 4.
    states: int = field(default=6, metadata={
        "aliases": ("--stepwise-states",), "help": "states of the evaluation before and after (with headroom)"})
    samples: int = field(default=2, metadata={
        "aliases": ("--stepwise-samples",),
        "help": "completions per state, one per sampling seed (seed, seed + 1, ...); 2 or more gives a null "
                "control (the seeds in halves)"})
    headroom: str = field(default="prefer", metadata={
        "choices": HEADROOM_CHOICES, "aliases": ("--stepwise-headroom",),
        "help": "states whose reference score is the metric's perfect value: prefer (drawn only to fill up, "
                "reported apart), require (never drawn; a run whose eval tasks have none with headroom stops), any"})
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
        check.integer("stepwise.samples", self.samples, 1)
        check.choice("stepwise.headroom", self.headroom, HEADROOM_CHOICES)
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

    states: int = field(default=24, metadata={"help": "states evaluated (with headroom, see --headroom)"})
    state_seed: int = field(default=0, metadata={"help": "seed of the state draw"})
    samples: int = field(default=4, metadata={
        "help": "k: completions per state, one per sampling seed (sample-seed, sample-seed + 1, ...)"})
    sample_seed: int = field(default=0, metadata={
        "help": "the first sampling seed (a null control: the same policy at another first seed, "
                "compared with --other-seeds)"})
    headroom: str = field(default="require", metadata={
        "choices": HEADROOM_CHOICES,
        "help": "states whose reference score is the metric's perfect value: require (drop them), prefer "
                "(only to fill up), any"})
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
        check.integer("stepwise.samples", self.samples, 1)
        check.integer("stepwise.sample_seed", self.sample_seed, 0)
        check.choice("stepwise.headroom", self.headroom, HEADROOM_CHOICES)
        check.text("stepwise.journals", self.journals, "give a folder of expert journals, or null", optional=True)
        check.integer("stepwise.expert_steps", self.expert_steps, 1)
        object.__setattr__(self, "stages", tuple(self.stages))
        check.choice("stepwise.prompt_profile", self.prompt_profile, PROFILES)
