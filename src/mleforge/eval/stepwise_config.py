"""The step-wise evaluation a training run makes of its model (mleforge.eval.stepwise runs it).

A fixed set of states of the eval tasks, drawn with the run's seed from expert journals of those
tasks, one completion each: before training, after the warm start (after_sft) and after.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mleforge import config as check
from mleforge.errors import ConfigError
from mleforge.policies.engines.base import ENGINE_CHOICES
from mleforge.policies.engines.ct2_convert import QUANTIZATIONS


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
