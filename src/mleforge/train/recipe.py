"""`mleforge train`, the recipe: step-wise GRPO on the evolving curriculum, from set-up to report.

    preflight(config, registry)    every check that needs no model (mleforge.train.preflight)
    train(config, run_dir)         a new run
    resume(run_dir)                continue a run after a crash or a SIGKILL, at any moment

A run, top to bottom (`_run`, `set_up`, then `_train_and_save`):

    prepare the tasks -> the executor -> the state buffer
    -> the step-wise evaluation before (the model as given; beside the expert's collection
       when --sft auto collects: mleforge.eval.background)
    -> seed the buffer (expert journals: --journals, the collection's, or the template expert's)
    -> warm start (mleforge.train.warm_start) -> the step-wise evaluation after it (stepwise.after_sft)
    -> recover (back to the last complete checkpoint) -> build the GRPO trainer (mleforge.train.grpo)
    -> train -> save final/ -> the step-wise evaluation after -> run.json and the report

Launched as several processes (`accelerate launch --num_processes N`), the main process alone
does the set-up (everything before the trainer) and writes the run directory; the others wait
for it, read the buffer, and train beside it (mleforge.train.ranks).

The run directory's layout is mleforge.runs'. Progress goes to the `console` the caller
passes (the CLI's stderr console), stderr by default.

Resuming: the last complete checkpoint (k steps done) is loaded; the buffer is rewound to
the end of step k - 1, the steps after it are dropped from metrics.jsonl and rollouts/,
and training continues. Each step's randomness is a function of (seed, step) and the
buffer is exactly as that step first saw it, so the resumed run repeats, rollout for
rollout, what the uninterrupted run would have done.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from rich.console import Console

from mleforge.eval.background import BeforeEvaluation
from mleforge.runs import (
    CHECKPOINT_RECORD,
    CHECKPOINTS_DIR,
    CONFIG_FILE,
    FINAL_DIR,
    METRICS_FILE,
    REPORT_DIR,
    RESULTS_CACHE,
    ROLLOUTS_DIR,
    RUN_RECORD,
    STEPWISE_DIR,
)
from mleforge.train.checkpoint_marks import discard_after, last_checkpoint, read_mark
from mleforge.train.config import TrainConfig, upgrade_train_dict
from mleforge.train.errors import TrainError
from mleforge.train.plan import Plan, run_record
from mleforge.train.preflight import preflight
from mleforge.train.ranks import Ranks, process_ranks
from mleforge.train.warm_start import collect_expert, sft_done, warm_start
from mleforge.utils.atomic import atomic_write
from mleforge.utils.memory import release_memory
from mleforge.utils.quiet import quiet_libraries

if TYPE_CHECKING:
    from transformers import TrainerCallback

    from mleforge.curriculum.buffer import StateBuffer
    from mleforge.eval.stages import StageSettings
    from mleforge.expert.collect import CollectResult
    from mleforge.sandbox import Executor
    from mleforge.tasks.registry import TaskRegistry
    from mleforge.train.prompt_renderer import Renderer


__all__ = ["Plan", "TrainResult", "load_run_config", "preflight", "resume", "train"]


@dataclass(frozen=True)
class TrainResult:
    run_dir: str
    steps: int
    final_model: str
    report: str | None
    wall_s: float
    rank: int = 0  # this process's, in a launch of several (the main process's is 0)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def default_run_dir(config: TrainConfig) -> Path:
    safe = config.model.spec.replace("/", "_").replace(":", "-")
    return Path("runs/train") / f"{safe}-{config.preset}-seed{config.seed}"


def train(config: TrainConfig, run_dir: str | Path | None = None, *, registry: TaskRegistry | None = None,
          progress: bool = True, renderer: Renderer | None = None, callbacks: Sequence[TrainerCallback] = (),
          console: Console | None = None) -> TrainResult:
    """Start a new run in `run_dir` (refused if it holds one: resume it instead). `renderer`
    replaces the prompt renderer (mleforge.train.prompt_renderer); `callbacks` are
    TrainerCallbacks added after the run's own (a benchmark's timers)."""
    from mleforge.tasks.registry import TaskRegistry

    registry = registry or TaskRegistry()
    folder = Path(run_dir or default_run_dir(config)).resolve()
    if (folder / CONFIG_FILE).is_file():
        raise TrainError(f"{folder} holds a run already; continue it with `mleforge train --resume {folder}`, "
                         "or pass another --run-dir")
    plan = preflight(config, registry)
    ranks = process_ranks(plan.device)
    ranks.wait()  # every rank has looked for a run there before the main process writes one
    if ranks.main:
        folder.mkdir(parents=True, exist_ok=True)
        atomic_write(folder / CONFIG_FILE, yaml.safe_dump(plan.config.to_dict(), sort_keys=False))
    return _run(plan, folder, registry, progress, renderer, callbacks, console)


def load_run_config(run_dir: str | Path) -> TrainConfig:
    path = Path(run_dir) / CONFIG_FILE
    if not path.is_file():
        raise TrainError(f"--resume {run_dir}: no {CONFIG_FILE} there; give the run directory `mleforge train` made")
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    return TrainConfig.from_dict(upgrade_train_dict(data))  # a run from before the tree, or before a setting


def resume(run_dir: str | Path, *, registry: TaskRegistry | None = None, progress: bool = True,
           renderer: Renderer | None = None, callbacks: Sequence[TrainerCallback] = (),
           console: Console | None = None) -> TrainResult:
    """Continue the run in `run_dir` from its last complete checkpoint, with its own config."""
    from mleforge.tasks.registry import TaskRegistry

    registry = registry or TaskRegistry()
    folder = Path(run_dir).resolve()
    config = load_run_config(folder)
    _check_base_weights(folder, config)
    plan = preflight(config, registry)
    if plan.config != config:
        raise TrainError(f"{folder} was configured for another machine (it resolved generation "
                         f"{config.generation.backend}, bf16 {config.bf16}; here {plan.config.generation.backend}, "
                         f"{plan.config.bf16}); resume it where it ran, or start a new run")
    return _run(plan, folder, registry, progress, renderer, callbacks, console)


def _check_base_weights(folder: Path, config: TrainConfig) -> None:
    """A run goes on only on the weights it started from, not on a bundled model this mleforge
    converts otherwise (its adapter would be trained further on another model)."""
    from mleforge.policies.model_source import base_weights_mismatch

    try:
        record = json.loads((folder / RUN_RECORD).read_text())
    except (OSError, ValueError):
        return  # no record yet: the run never started
    mismatch = base_weights_mismatch(config.model.spec, record.get("base_weights"))
    if mismatch:
        raise TrainError(f"{folder} started on {mismatch}. Finish the run with the mleforge version it started "
                         f"with, or start a new run")


# --- the recipe ------------------------------------------------------------------------------------


def _run(plan: Plan, folder: Path, registry: TaskRegistry, progress: bool, renderer: Renderer | None,
         callbacks: Sequence[TrainerCallback] = (), console: Console | None = None) -> TrainResult:
    ranks = process_ranks(plan.device)
    done = finished_run(folder)
    if done is not None:
        return replace(done, rank=ranks.index)
    started = time.monotonic()
    config = plan.config
    from mleforge.curriculum.buffer import StateBuffer

    if ranks.main:
        atomic_write(folder / RUN_RECORD, json.dumps(run_record(plan, "running"), indent=1))
        from mleforge.tasks.preparation import prepare

        for task in (*plan.tasks, *plan.eval_tasks):
            prepare(task)
    executor = _executor(config, folder) if ranks.main else None
    buffer: StateBuffer | None = None
    try:
        if ranks.main:
            buffer = StateBuffer(folder, config.buffer, config.learnability)
            set_up(plan, folder, registry, executor, buffer, progress, console, apart=ranks.count > 1)
        ranks.wait()  # the main process's set-up is done: tasks, seeds, warm start, recovery
        if executor is None:  # each rank executes its own rollouts
            executor = _executor(config, folder)
        if buffer is None:  # the other ranks read the buffer the main process owns
            buffer = StateBuffer(folder, config.buffer, config.learnability, writer=False)
        spec = warm_start(plan, folder, None, progress=False)  # made by the set-up: its model's spec
        checkpoint = last_checkpoint(folder / CHECKPOINTS_DIR)
        final, steps_done = _train_and_save(plan, folder, spec, buffer, executor, checkpoint, ranks, renderer=renderer,
                                            callbacks=callbacks, progress=progress and ranks.main, console=console)
        release_memory()  # the GRPO trainer's, before the evaluation after loads its own model
        if ranks.main:
            stepwise_evaluation(plan, folder, f"hf:{final}", "after", registry, executor, progress, console=console)
    finally:
        if buffer is not None:
            buffer.close()
        if executor is not None:
            executor.close()  # the pool's zygote, if it is one, goes with it
    wall = round(time.monotonic() - started, 1)
    if not ranks.main:  # the main process writes run.json and the report
        return TrainResult(str(folder), steps_done, str(final), None, wall, rank=ranks.index)
    return _finish(plan, folder, steps_done, final, wall)


def set_up(plan: Plan, folder: Path, registry: TaskRegistry, executor: Executor, buffer: StateBuffer, progress: bool,
           console: Console | None, *, apart: bool = False) -> None:
    """Everything before the trainer, on the main process: the step-wise evaluation of the model
    as given (beside the expert's collection when --sft auto collects: mleforge.eval.background),
    the buffer's seeds, the warm start and its evaluation, and the recovery to the last complete
    checkpoint. `apart`: the warm start's SFT runs in a process of its own (a multi-process launch)."""
    config = plan.config
    before: BeforeEvaluation | None = None
    try:
        auto = config.warm_start_mode == "auto"
        collecting = auto and (sft_done(folder) is None or buffer.sealed_step is None)
        before = before_evaluation(plan, folder, registry, executor, progress, alongside=collecting, console=console)
        collected = None
        if collecting:
            collected = collect_expert(plan, folder, registry, executor, progress, console=console)
        before.wait()
        release_memory()  # the evaluation's engine, before the warm start loads a model to train
        if buffer.sealed_step is None:
            seed_buffer(plan, folder, buffer, collected, registry, executor)
        spec = warm_start(plan, folder, collected, progress, console, apart=apart)
        release_memory()  # the SFT trainer's model and optimizer (held in reference cycles) go now
        if config.warm_start_mode != "none" and config.stepwise.after_sft:  # the warm start's share of the change
            stepwise_evaluation(plan, folder, spec, "sft", registry, executor, progress, console=console)
        recover(folder, buffer)
    finally:
        if before is not None:
            before.stop()  # a failure while it ran alongside: none of its runs outlives the executor


def _train_and_save(plan: Plan, folder: Path, spec: str, buffer: StateBuffer, executor: Executor,
                    checkpoint: Path | None, ranks: Ranks, *, renderer: Renderer | None,
                    callbacks: Sequence[TrainerCallback], progress: bool, console: Console | None
                    ) -> tuple[Path, int]:
    """Build the GRPO trainer, train (from `checkpoint` where there is one), save final/ (the
    main process): (the final model's folder, steps done)."""
    from mleforge.train.grpo.training import build_trainer
    from mleforge.train.model import save_trained

    training = build_trainer(plan, folder, spec, buffer, executor, ranks, renderer=renderer, progress=progress,
                             console=console)
    trainer = training.trainer
    for callback in callbacks:
        trainer.add_callback(callback)
    try:
        with quiet_libraries():
            trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)
    finally:
        training.close()
    final = folder / FINAL_DIR
    if ranks.main:
        save_trained(trainer.model, trainer.processing_class, final, full=training.full, base_spec=training.base_spec)
        record = run_record(plan, "running")
        (final / CHECKPOINT_RECORD).write_text(json.dumps(record, indent=1), encoding="utf-8")
    return final, trainer.state.global_step  # the training model's memory goes with this frame


def _finish(plan: Plan, folder: Path, steps_done: int, final: Path, wall: float) -> TrainResult:
    """run.json says done, with the step-wise evaluation's paired differences
    (mleforge.eval.stages.paired_summary); the report is written."""
    from mleforge.eval.stages import paired_summary

    atomic_write(folder / RUN_RECORD, json.dumps(run_record(
        plan, "done", steps_done=steps_done, final_model=str(final), wall_s=wall,
        report=str(folder / REPORT_DIR / "report.html"), stepwise=paired_summary(folder)), indent=1))
    from mleforge.eval.report import write_report

    written = write_report([folder], folder / REPORT_DIR)
    return TrainResult(str(folder), steps_done, str(final), written.html, wall)


def finished_run(folder: Path) -> TrainResult | None:
    """The result of the run in `folder` if it is done (run.json says so), else None."""
    try:
        record = json.loads((folder / RUN_RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if record.get("status") != "done":
        return None
    return TrainResult(str(folder), record["steps_done"], record["final_model"], record.get("report"),
                       record["wall_s"])


def seed_buffer(plan: Plan, folder: Path, buffer: StateBuffer, collected: CollectResult | None,
                registry: TaskRegistry, executor: Executor) -> None:
    """The buffer's seed states: from --journals, else the warm start's collection, else one
    template-expert episode per task made in <run>/expert/."""
    from mleforge.curriculum.seeds import set_up_tasks
    from mleforge.expert.episodes import expert_journals, load_journals

    config = plan.config
    ids = [t.id for t in plan.tasks]
    if config.journals is not None:
        journals = load_journals(config.journals, ids)
    elif collected is not None:  # the warm start's expert episodes seed the buffer too
        journals = load_journals(collected.journals_dir, ids)
    else:
        journals = expert_journals(plan.tasks, folder, steps=config.collect.steps, seed=config.seed,
                                   executor=executor, registry=registry)
    set_up_tasks(buffer, plan.tasks, journals, stages=config.seed_stages)


def recover(folder: Path, buffer: StateBuffer) -> tuple[Path | None, int]:
    """Bring a run directory back to its last complete checkpoint: (checkpoint or None, steps
    done). The buffer is rewound to the checkpoint's step; later metrics lines, rollouts and
    checkpoints are dropped (the resumed steps write them again)."""
    checkpoint = last_checkpoint(folder / CHECKPOINTS_DIR)
    done = read_mark(checkpoint)["global_step"] if checkpoint else 0
    sealed = buffer.sealed_step
    if sealed is not None and sealed > done - 1:
        buffer.rewind(done - 1)
    discard_after(folder / CHECKPOINTS_DIR, done)
    metrics = folder / METRICS_FILE
    if metrics.is_file():
        kept = [line for line in metrics.read_text(encoding="utf-8").splitlines() if _step_of(line) < done]
        atomic_write(metrics, "".join(line + "\n" for line in kept))
    for path in (folder / ROLLOUTS_DIR).glob("step-*.jsonl"):
        if int(path.stem.split("-")[1]) >= done:
            path.unlink()
    return checkpoint, done


def _step_of(line: str) -> float:
    """A metrics line's step; a line a kill left half-written counts as after every step."""
    try:
        return json.loads(line)["step"]
    except (ValueError, KeyError, TypeError):
        return float("inf")


# --- the executor ----------------------------------------------------------------------------------


def _executor(config: TrainConfig, folder: Path) -> Any:
    from mleforge.sandbox import CachingExecutor, make_executor

    kind = config.sandbox.executor
    options: dict[str, Any] = {} if config.sandbox.exec_workers is None or kind == "ray" else {"max_workers": config.sandbox.exec_workers}
    if config.sandbox.isolation is not None:
        options["isolation"] = config.sandbox.isolation
    executor = make_executor(kind, **options)  # auto: the warm pool where it isolates, else local
    return CachingExecutor(executor, folder / RESULTS_CACHE) if config.sandbox.cache else executor


def stage_settings(plan: Plan) -> StageSettings:
    """What every step-wise evaluation of the run shares, from its config."""
    from mleforge.eval.stages import StageSettings
    from mleforge.policies import SamplingConfig
    from mleforge.train.grpo.executing_reward import execution_workers

    config = plan.config
    options: dict[str, Any] = {"engine": config.stepwise.engine}
    if config.stepwise.quantization is not None:
        options["quantization"] = config.stepwise.quantization
    if config.model.threads is not None:
        options["num_threads"] = config.model.threads
    sampling = SamplingConfig(temperature=config.stepwise.temperature, max_new_tokens=config.max_new_tokens,
                              seed=config.seed)
    return StageSettings(
        enabled=config.stepwise.enabled, eval_tasks=tuple(plan.eval_tasks), n_states=config.stepwise.states,
        seed=config.seed, stages=config.seed_stages, expert_steps=config.stepwise.expert_steps, sampling=sampling,
        prompt=config.prompt, reward=config.reward,
        workers=execution_workers(config, plan.eval_tasks) if config.stepwise.enabled and plan.eval_tasks else 0,
        run_timeout_s=config.sandbox.run_timeout_s, policy_options=options, samples=config.stepwise.samples,
        headroom=config.stepwise.headroom)


def stepwise_evaluation(plan: Plan, folder: Path, spec: str, label: str, registry: TaskRegistry | None,
                        executor: Executor, progress: bool = False, console: Console | None = None
                        ) -> dict[str, Any]:
    """The step-wise evaluation of `spec` on the eval tasks, saved as stepwise/<label>.json;
    done once per label (mleforge.eval.stages.evaluate_stage)."""
    from mleforge.eval.stages import evaluate_stage

    return evaluate_stage(stage_settings(plan), folder, spec, label, registry, executor, progress, console)


def before_evaluation(plan: Plan, folder: Path, registry: TaskRegistry | None, executor: Executor,
                      progress: bool, *, alongside: bool, console: Console | None = None) -> BeforeEvaluation:
    """The step-wise evaluation before training: in its own thread beside the expert's
    collection when `alongside` (and wanted, and not made yet), else at once."""
    config = plan.config
    done = (folder / STEPWISE_DIR / "before.json").is_file()
    wanted = config.stepwise.enabled and bool(plan.eval_tasks)
    spec = config.model.spec

    def evaluate(runs_on: Executor, shown: bool) -> dict[str, Any]:
        return stepwise_evaluation(plan, folder, spec, "before", registry, runs_on, shown, console=console)

    subject = f"{spec} on {', '.join(t.id for t in plan.eval_tasks)}"
    return BeforeEvaluation(evaluate, executor, background=alongside and wanted and not done, progress=progress,
                            subject=subject, console=console)
