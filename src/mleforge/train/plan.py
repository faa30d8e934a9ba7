"""The Plan of a train run: what preflight (mleforge.train.preflight) resolved, and the run
record (run.json) a plan writes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mleforge.policies.model_source import ModelSource, base_weights
from mleforge.tasks.task import Task
from mleforge.train.config import TrainConfig


@dataclass(frozen=True)
class Plan:
    """What preflight resolved: the config with its `auto` values decided for this machine."""

    config: TrainConfig
    tasks: tuple[Task, ...]
    eval_tasks: tuple[Task, ...]
    model: ModelSource
    device: str
    world_size: int


def run_record(plan: Plan, status: str, **extra: Any) -> dict[str, Any]:
    """The run.json record of a train run (and of its checkpoints: the contamination guard reads `tasks`)."""
    c = plan.config
    return {"kind": "train", "tasks": [t.id for t in plan.tasks], "eval_tasks": [t.id for t in plan.eval_tasks],
            "policy": c.model.spec, "model": c.model.spec, "preset": c.preset, "seed": c.seed, "steps": c.steps,
            "sampler": c.sampler.kind, "buffer_growth": c.buffer_growth, "sft": c.warm_start, "generation": c.generation.backend,
            "status": status, "base_weights": base_weights(c.model.spec), **extra}

