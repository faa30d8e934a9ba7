"""A training run's step-wise evaluations at its stages: before training, after the warm start, after.

    settings = StageSettings(...)                    # the run's eval tasks, states, sampling, prompt, reward
    evaluate_stage(settings, run_dir, "hf:<run>/final", "after", registry, executor)
    stepwise_stages(run_dir)                         # [(heading, StepwiseResult)]: before, after SFT, after
    paired_summary(run_dir)                          # the paired differences, for run.json

Each stage is saved as `<run>/stepwise/<label>.json` and made once: a resumed run reads it
back. Every label sees the same states (drawn with the run's seed from stepwise/expert/,
template-expert journals of the eval tasks, made once; states without headroom dropped),
the same `samples` sampling seeds (seed, seed + 1, ...), the same sampling, prompt and
reward config, so two stages compare paired (mleforge.eval.stepwise_compare). The training
recipe (mleforge.train.recipe) decides the settings from its config; this module knows
nothing of training.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console

from mleforge.runs import STEPWISE_DIR
from mleforge.utils.atomic import atomic_write
from mleforge.utils.memory import release_memory

if TYPE_CHECKING:
    from mleforge.agent.prompt_config import PromptConfig
    from mleforge.eval.stepwise import StepwiseResult
    from mleforge.policies import Policy, SamplingConfig
    from mleforge.reward import RewardConfig
    from mleforge.sandbox import Executor
    from mleforge.tasks.registry import TaskRegistry
    from mleforge.tasks.task import Task

# The step-wise evaluations of a run, in order, as their files name them (stepwise/<label>.json)
# and as their tables head them. "sft" is the warm start's model, evaluated where there is one.
STEPWISE_STAGES = (("before", "before"), ("sft", "after SFT"), ("after", "after"))


@dataclass(frozen=True)
class StageSettings:
    """What every stage of one run's step-wise evaluation shares. `enabled` False (or no
    `eval_tasks`) saves a stage as not available; `policy_options` go to make_policy with
    the spec (the engine, quantization and threads of the run's local model)."""

    enabled: bool
    eval_tasks: tuple[Task, ...]
    n_states: int
    seed: int
    stages: tuple[str, ...]
    expert_steps: int
    sampling: SamplingConfig
    prompt: PromptConfig
    reward: RewardConfig
    workers: int
    run_timeout_s: float | None
    policy_options: dict[str, Any] = field(default_factory=dict)
    samples: int = 1  # k: completions per state, at sampling seeds seed, seed + 1, ...
    headroom: str = "prefer"  # the draw's (mleforge.eval.stepwise.draw_states): never stops a run


def make_local_policy(spec: str, options: dict[str, Any]) -> Policy:
    """A policy of a local model spec for generation outside the trainer (the step-wise
    evaluation), on the run's engine and quantization."""
    from mleforge.policies import make_policy

    return make_policy(spec, **options)


def evaluate_stage(settings: StageSettings, folder: Path, spec: str, label: str, registry: TaskRegistry | None,
                   executor: Executor, progress: bool = False, console: Console | None = None) -> dict[str, Any]:
    """The step-wise evaluation of `spec` on the eval tasks (mleforge.eval.stepwise), saved as
    stepwise/<label>.json; done once per label (see the module docstring)."""
    from mleforge.eval.stepwise import draw_states, record_progress, run_stepwise, sample_seeds

    out = folder / STEPWISE_DIR / f"{label}.json"
    if out.is_file():
        return json.loads(out.read_text(encoding="utf-8"))
    out.parent.mkdir(parents=True, exist_ok=True)
    if not settings.enabled or not settings.eval_tasks:
        result: dict[str, Any] = {"available": False, "reason": "turned off (stepwise.enabled, or no --eval-tasks)"}
        atomic_write(out, json.dumps(result, indent=1))
        return result
    tasks = list(settings.eval_tasks)
    draw = draw_states(tasks, n_states=settings.n_states, seed=settings.seed,
                       work_dir=folder / STEPWISE_DIR / "expert", stages=settings.stages, headroom=settings.headroom,
                       registry=registry, steps=settings.expert_steps, executor=executor, progress=progress,
                       console=console, reward_config=settings.reward)
    seeds = sample_seeds(settings.seed, settings.samples)
    policy = make_local_policy(spec, settings.policy_options)
    try:
        with record_progress(f"step-wise evaluation ({label}): generating, then running",
                             len(draw.states) * len(seeds), enabled=progress, console=console) as on_record:
            evaluated = run_stepwise(policy, draw.states, tasks, executor, sampling=settings.sampling, seeds=seeds,
                                     prompt_config=settings.prompt, reward_config=settings.reward, policy_name=spec,
                                     workers=settings.workers, run_timeout_s=settings.run_timeout_s,
                                     draw=draw.to_dict(), on_record=on_record)
    finally:
        policy.close()
        release_memory()  # its engine's weights, freed, back to the system before training goes on
    choice = getattr(policy, "choice", None)  # hf/bundled policies: the engine taken and why
    result = {"available": True, "label": label,
              "engine": None if choice is None else {"name": choice.name, "reason": choice.reason},
              **evaluated.to_dict()}
    atomic_write(out, json.dumps(result, indent=1, default=str))
    return result


def stepwise_stages(folder: Path) -> list[tuple[str, StepwiseResult]] | None:
    """The run's finished step-wise evaluations as (heading, StepwiseResult), in order; None
    unless both the one before and the one after training are there."""
    from mleforge.eval.stepwise import StepwiseResult

    found = {}
    for label, heading in STEPWISE_STAGES:
        path = folder / STEPWISE_DIR / f"{label}.json"
        data = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
        if data.get("available"):
            found[label] = (heading, StepwiseResult.from_dict(data))
    if "before" not in found or "after" not in found:
        return None
    return [found[label] for label, _ in STEPWISE_STAGES if label in found]


def paired_summary(folder: Path) -> dict[str, Any] | None:
    """The run's paired differences (mleforge.eval.stepwise_report.stage_comparisons: after SFT −
    before, after − after SFT, after − before) and the null control of the evaluation before
    (its seeds in halves), as dicts for run.json; None unless before and after are there."""
    from mleforge.errors import ConfigError
    from mleforge.eval.stepwise_compare import null_control
    from mleforge.eval.stepwise_report import stage_comparisons

    stages = stepwise_stages(folder)
    if stages is None:
        return None
    try:
        comparisons = [c.to_dict() for c in stage_comparisons(stages)]
    except ConfigError as exc:  # evaluations of another version of the run, on other states
        return {"error": str(exc)}
    before = stages[0][1]
    control = null_control(before, stages[0][0]).to_dict() if len(before.seeds) >= 2 else None
    return {"comparisons": comparisons, "null_control": control}
