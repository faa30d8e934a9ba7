"""`mleforge train`: step-wise GRPO on the evolving curriculum, from set-up to report.

    preflight(config, registry)    every check that needs no model: the extras, the model
                                   spec, the tasks, the warm start, this machine; raises
                                   with the reason and the fix before anything heavy
    train(config, run_dir)         a new run
    resume(run_dir)                continue a run after a crash or a SIGKILL, at any moment

A run directory holds

    config.yaml                the full resolved TrainConfig
    run.json                   kind "train", its tasks (the contamination guard reads them)
    expert/<task>/             the template expert's episodes (--sft none or PATH, no --journals)
    collect/                   --sft auto: `mleforge collect` with the template expert (compact
                               prompts, the training tasks); its journals seed the buffer
    sft/                       the warm start of --sft auto (an `mleforge sft` run on collect/)
    buffer.sqlite              the state buffer (mleforge.curriculum)
    results.sqlite             the result cache of the rollouts' executions
    checkpoints/checkpoint-<k> adapter (or model), optimizer, scheduler, RNG states, trainer
                               state, and the buffer's step (mleforge.train.checkpoints)
    rollouts/step-<k>.jsonl    every rollout of step k (mleforge.train.records.RolloutLine)
    metrics.jsonl              one line per step (mleforge.train.records.StepMetrics)
    stepwise/{before,after}.json   the step-wise evaluation on the eval tasks: before, the model
                               as given (before any warm start; made alongside collect/ on a
                               run that collects, BeforeEvaluation); after, final/. The same
                               states (from stepwise/expert/, template-expert journals of the
                               eval tasks) and sampling both times
    stepwise/sft.json          the same for the warm start's model (stepwise.after_sft)
    ct2-rollouts/rank-<i>/     generation ct2: the engine's converted weights while it runs
                               (deleted at the end, and when a killed run resumes)
    final/                     the trained adapter (or model): `hf:<run>/final`
    report/                    `mleforge report <run>`, written at the end

Resuming: the last complete checkpoint (k steps done) is loaded; the buffer is rewound to
the end of step k - 1, the steps after it are dropped from metrics.jsonl and rollouts/,
and training continues. Each step's randomness is a function of (seed, step) and the
buffer is exactly as that step first saw it, so the resumed run repeats, rollout for
rollout, what the uninterrupted run would have done.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from mleforge.eval.contamination import CHECKPOINT_RECORD, RUN_RECORD
from mleforge.policies.checkpoint import ModelSource
from mleforge.sandbox.stoppable import ExecutorStopped, StoppableExecutor
from mleforge.tasks.task import Task
from mleforge.train.checkpoints import (
    atomic_write,
    checkpoint_callback,
    discard_after,
    last_checkpoint,
    read_mark,
)
from mleforge.train.config import TrainConfig
from mleforge.train.errors import TrainError
from mleforge.train.feedback import METRICS_FILE, ROLLOUTS_DIR
from mleforge.train.model import check_model, require_train_extra

log = logging.getLogger("mleforge.train")

CONFIG_FILE = "config.yaml"
CHECKPOINTS_DIR = "checkpoints"
FINAL_DIR = "final"
SFT_DIR = "sft"
STEPWISE_DIR = "stepwise"
COLLECT_DIR = "collect"
GROUP_SELECTORS = ("lite", "all")  # task selectors the eval tasks are taken out of


@dataclass(frozen=True)
class Plan:
    """What preflight resolved: the config with its `auto` values decided for this machine."""

    config: TrainConfig
    tasks: tuple[Task, ...]
    eval_tasks: tuple[Task, ...]
    model: ModelSource
    device: str
    world_size: int


@dataclass(frozen=True)
class TrainResult:
    run_dir: str
    steps: int
    final_model: str
    report: str | None
    wall_s: float

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def default_run_dir(config: TrainConfig) -> Path:
    safe = config.model.spec.replace("/", "_").replace(":", "-")
    return Path("runs/train") / f"{safe}-{config.preset}-seed{config.seed}"


def sft_model_folder(path: str) -> Path:
    """The model folder of `--sft PATH`: an `mleforge sft` run directory or its model/."""
    folder = Path(path).expanduser().resolve()
    if (folder / "model").is_dir() and not (folder / "adapter_config.json").exists():
        folder = folder / "model"
    return folder


def preflight(config: TrainConfig, registry: Any) -> Plan:
    """Check everything that can be checked before loading a model (see the module docstring)."""
    require_train_extra("mleforge train")
    eval_tasks = tuple(registry.select(config.eval_tasks)) if config.eval_tasks.strip() else ()
    eval_ids = {t.id for t in eval_tasks}
    tasks = tuple(registry.select(config.tasks))
    if config.tasks.strip() in GROUP_SELECTORS:  # `lite` trains on the lite tasks the evaluation does not use
        tasks = tuple(t for t in tasks if t.id not in eval_ids)
    if not tasks:
        raise TrainError(f"--tasks {config.tasks!r} selects no task (after leaving out the --eval-tasks); give "
                         "lite, all or task ids (mleforge tasks list)")
    overlap = sorted({t.id for t in tasks} & eval_ids)
    if overlap:
        raise TrainError(f"--eval-tasks {', '.join(overlap)} are also training tasks; the step-wise evaluation "
                         "measures tasks the run does not train on: pick others (or --eval-tasks '')")
    source = check_model(config.model)
    if config.warm_start_mode == "auto":
        collect_config(config, tasks)  # its prompt must be the run's (below)
    if config.warm_start_mode == "path":
        folder = sft_model_folder(config.warm_start)
        if not folder.is_dir():
            raise TrainError(f"--sft {config.warm_start}: no such folder; give an `mleforge sft` run (or its model/)")
        check_model(replace(config.model, spec=f"hf:{folder}"))
    if config.journals is not None:
        from mleforge.train.journals import journal_files

        journal_files(config.journals)
    import torch
    from accelerate import PartialState

    from mleforge.train.generation import resolve_generation
    from mleforge.train.model import resolve_bf16, resolve_device

    device = resolve_device(torch, config.model.device)
    world = PartialState().num_processes
    if config.sequences_per_step % (config.micro_batch * world):
        raise TrainError(f"{config.sequences_per_step} sequences a step do not split into micro-batches of "
                         f"{config.micro_batch} on {world} processes; change --groups-per-step or micro_batch")
    backend = resolve_generation(config.generation.backend, cuda=device.startswith("cuda"),
                                 converts=lambda: ct2_architecture_problem(source, config.model.spec) is None)
    if backend == "ct2" and config.generation.backend == "ct2":
        problem = ct2_architecture_problem(source, config.model.spec)
        if problem is not None:
            raise TrainError(f"--generation ct2: {problem}; use --generation trl")
    bf16 = resolve_bf16(config.bf16, device, torch)
    resolved = config.replace(generation={"backend": backend}, bf16=bf16)
    return Plan(resolved, tasks, eval_tasks, source, device, world)


def ct2_architecture_problem(source: ModelSource, spec: str) -> str | None:
    """Why ctranslate2 cannot convert the model (read from its config alone), or None."""
    from transformers import AutoConfig

    from mleforge.policies.bundled import bundled_at, is_converted
    from mleforge.policies.engines.ct2_convert import architecture_converts, config_class_converts

    base = Path(source.base)
    bundled = bundled_at(base)
    if bundled is not None and bundled.config_class and not is_converted(base, bundled):
        # Preflight converts nothing: a bundled model not yet converted (a fresh machine) has
        # no config to read; its catalog entry names the class its conversion will have.
        if not config_class_converts(bundled.config_class):
            return f"CTranslate2 cannot convert {bundled.config_class} models ({spec})"
        return None
    options = {"gguf_file": base.name} if source.base.endswith(".gguf") else {}
    try:
        model_config = AutoConfig.from_pretrained(base.parent if options else source.base, local_files_only=True,
                                                  **options)
    except (OSError, ValueError) as exc:
        raise TrainError(f"--model {spec} does not load: {exc}; check the path (an `mleforge sft`/`train` "
                         "checkpoint folder or a Hugging Face model folder), or generate with --generation trl") \
            from None
    if not architecture_converts(model_config):
        return f"CTranslate2 cannot convert {type(model_config).__name__} models ({spec})"
    return None


def _record(plan: Plan, status: str, **extra: Any) -> dict[str, Any]:
    c = plan.config
    return {"kind": "train", "tasks": [t.id for t in plan.tasks], "eval_tasks": [t.id for t in plan.eval_tasks],
            "policy": c.model.spec, "model": c.model.spec, "preset": c.preset, "seed": c.seed, "steps": c.steps,
            "sampler": c.sampler, "buffer_growth": c.buffer_growth, "sft": c.warm_start, "generation": c.generation.backend,
            "status": status, **extra}


def train(config: TrainConfig, run_dir: str | Path | None = None, *, registry: Any = None, progress: bool = True,
          renderer: Any = None, callbacks: Sequence[Any] = ()) -> TrainResult:
    """Start a new run in `run_dir` (refused if it holds one: resume it instead). `renderer`
    replaces the prompt renderer (mleforge.train.prompts); `callbacks` are TrainerCallbacks
    added after the run's own (a benchmark's timers)."""
    from mleforge.tasks.registry import TaskRegistry

    registry = registry or TaskRegistry()
    folder = Path(run_dir or default_run_dir(config)).resolve()
    if (folder / CONFIG_FILE).is_file():
        raise TrainError(f"{folder} holds a run already; continue it with `mleforge train --resume {folder}`, "
                         "or pass another --run-dir")
    plan = preflight(config, registry)
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write(folder / CONFIG_FILE, yaml.safe_dump(plan.config.to_dict(), sort_keys=False))
    return _run(plan, folder, registry, progress, renderer, callbacks)


def load_run_config(run_dir: str | Path) -> TrainConfig:
    path = Path(run_dir) / CONFIG_FILE
    if not path.is_file():
        raise TrainError(f"--resume {run_dir}: no {CONFIG_FILE} there; give the run directory `mleforge train` made")
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    from mleforge.train.config import upgrade_train_dict

    return TrainConfig.from_dict(upgrade_train_dict(data))  # a run from before the tree, or before a setting


def resume(run_dir: str | Path, *, registry: Any = None, progress: bool = True, renderer: Any = None,
           callbacks: Sequence[Any] = ()) -> TrainResult:
    """Continue the run in `run_dir` from its last complete checkpoint, with its own config."""
    from mleforge.tasks.registry import TaskRegistry

    registry = registry or TaskRegistry()
    folder = Path(run_dir).resolve()
    config = load_run_config(folder)
    plan = preflight(config, registry)
    if plan.config != config:
        raise TrainError(f"{folder} was configured for another machine (it resolved generation "
                         f"{config.generation.backend}, bf16 {config.bf16}; here {plan.config.generation.backend}, "
                         f"{plan.config.bf16}); resume it where it ran, or start a new run")
    return _run(plan, folder, registry, progress, renderer, callbacks)


def _finished(folder: Path) -> TrainResult | None:
    try:
        record = json.loads((folder / RUN_RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if record.get("status") != "done":
        return None
    return TrainResult(str(folder), record["steps_done"], record["final_model"], record.get("report"),
                       record["wall_s"])


def recover(folder: Path, buffer: Any) -> tuple[Path | None, int]:
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


def _executor(config: TrainConfig, folder: Path) -> Any:
    from mleforge.sandbox import CachingExecutor, make_executor

    kind = config.sandbox.executor
    options: dict[str, Any] = {} if config.sandbox.exec_workers is None or kind == "ray" else {"max_workers": config.sandbox.exec_workers}
    if config.sandbox.isolation is not None:
        options["isolation"] = config.sandbox.isolation
    executor = auto_executor(options) if kind == "auto" else make_executor(kind, **options)
    return CachingExecutor(executor, folder / "results.sqlite") if config.sandbox.cache else executor


def auto_executor(options: dict[str, Any]) -> Any:
    """The warm pool wherever it isolates its runs as asked (as root, and as any user where
    bwrap may make a user namespace inside its sandbox: its probe is a real run), else the
    local executor, a bwrap per run at the cost of interpreter start-up (which raises in
    turn where nothing can isolate a run: never silently unisolated)."""
    from mleforge.errors import SandboxError
    from mleforge.sandbox import make_executor

    pool = make_executor("pool", **options)
    try:
        pool.resolve_isolation()
        return pool
    except SandboxError as exc:
        pool.close()
        log.info("the warm pool cannot isolate runs here (%s); training uses the local executor", exc)
    except BaseException:  # anything else (a bug, Ctrl-C) still stops the pool's zygote
        pool.close()
        raise
    return make_executor("local", **options)


def _workers(config: TrainConfig, tasks: tuple[Task, ...]) -> int:
    from mleforge.sandbox import RunLimits
    from mleforge.sandbox.batch import default_workers

    if config.sandbox.exec_workers is not None:
        return config.sandbox.exec_workers
    return min(default_workers(RunLimits.of(None, t.spec.limits)) for t in tasks)


def collect_config(config: TrainConfig, tasks: Sequence[Task]) -> Any:
    """The `mleforge collect` of --sft auto: the template expert on the training tasks, its
    samples rendered with the run's prompt (refused where the run's PromptConfig is not a
    profile collect can render: the warm start must see the prompts GRPO will)."""
    from mleforge.agent.prompts import PromptConfig
    profile, code_chars = config.prompt.profile, config.prompt.code_chars
    if PromptConfig.for_profile(profile, code_chars=code_chars) != config.prompt:
        raise TrainError(f"--sft auto renders its samples with the {profile} prompt profile, and this run's prompt "
                         f"config changes that profile's budgets beyond code_chars; use the profile's own "
                         f"budgets (PromptConfig.for_profile), or collect yourself and pass --sft PATH")
    sandbox = config.sandbox
    return replace(config.collect, tasks=",".join(t.id for t in tasks), first_seed=config.seed,
                   executor=sandbox.executor if sandbox.executor in ("local", "pool") else "local",
                   isolation=sandbox.isolation, prompt_profile=profile, code_chars=code_chars)


def collect_expert(plan: Plan, folder: Path, registry: Any, executor: Any, progress: bool) -> Any:
    """--sft auto's collect in <run>/collect (resumed: finished episodes are read back)."""
    from mleforge.expert.collect import collect_samples

    return collect_samples(collect_config(plan.config, plan.tasks), folder / COLLECT_DIR, registry=registry,
                           executor=executor, progress=progress)


def sft_done(folder: Path) -> Any:
    """The finished warm start of --sft auto in <run>/sft, or None."""
    from mleforge.train.sft import _finished

    return _finished(folder / SFT_DIR)


def warm_start(plan: Plan, folder: Path, collected: Any, progress: bool) -> str:
    """The spec of the model GRPO starts from: --sft none, PATH, or auto (SFT on `collected`,
    done once: a resumed run finds sft/ finished). auto fine-tunes on the samples of the
    stages GRPO trains on (`seed_stages`): on the cpu preset the short debug and improve
    edits, not the whole-script drafts that are 10x longer than its completion cap."""
    config = plan.config
    if config.warm_start_mode == "none":
        return config.model.spec
    if config.warm_start_mode == "path":
        return f"hf:{sft_model_folder(config.warm_start)}"
    done = sft_done(folder)
    if done is not None:
        return f"hf:{done.model_dir}"
    from mleforge.train.config import SFTRunConfig
    from mleforge.train.sft import run_sft

    if not collected.counts.get("samples"):
        raise TrainError(f"--sft auto: the template expert's episodes in {collected.out_dir} gave no sample "
                         f"(left out: {collected.counts.get('left_out')}); raise collect.episodes or collect.steps, or "
                         "pass --sft none")
    result = run_sft(SFTRunConfig(samples=collected.samples_path, out=str(folder / SFT_DIR), model=config.model,
                                  stages=config.seed_stages, seed=config.seed, sft=config.sft), progress=progress)
    return f"hf:{result.model_dir}"


def stepwise_sampling(config: TrainConfig) -> Any:
    from mleforge.policies import SamplingConfig

    return SamplingConfig(temperature=config.stepwise.temperature, max_new_tokens=config.max_new_tokens,
                          seed=config.seed)


def stepwise_evaluation(plan: Plan, folder: Path, spec: str, label: str, registry: Any, executor: Any,
                        progress: bool = False) -> dict[str, Any]:
    """The step-wise evaluation of `spec` on the eval tasks (mleforge.eval.stepwise), saved as
    stepwise/<label>.json; done once per label. Every label sees the same states (drawn with
    the run's seed from stepwise/expert/, made once), sampling, prompt and reward config."""
    from mleforge.eval.stepwise import record_progress, run_stepwise, stepwise_states

    out = folder / STEPWISE_DIR / f"{label}.json"
    if out.is_file():
        return json.loads(out.read_text(encoding="utf-8"))
    out.parent.mkdir(parents=True, exist_ok=True)
    config = plan.config
    if not config.stepwise.enabled or not plan.eval_tasks:
        result: dict[str, Any] = {"available": False, "reason": "turned off (stepwise.enabled, or no --eval-tasks)"}
        atomic_write(out, json.dumps(result, indent=1))
        return result
    states = stepwise_states(list(plan.eval_tasks), n_states=config.stepwise.states, seed=config.seed,
                             work_dir=folder / STEPWISE_DIR / "expert", stages=config.seed_stages,
                             registry=registry, steps=config.stepwise.expert_steps, executor=executor, progress=progress)
    policy = make_local_policy(spec, config)
    try:
        with record_progress(f"step-wise evaluation ({label}): generating, then running", len(states),
                             enabled=progress) as on_record:
            evaluated = run_stepwise(policy, states, list(plan.eval_tasks), executor,
                                     sampling=stepwise_sampling(config), prompt_config=config.prompt,
                                     reward_config=config.reward, policy_name=spec,
                                     workers=_workers(config, plan.eval_tasks), run_timeout_s=config.sandbox.run_timeout_s,
                                     on_record=on_record)
    finally:
        policy.close()
    choice = getattr(policy, "choice", None)  # hf/bundled policies: the engine taken and why
    result = {"available": True, "label": label,
              "engine": None if choice is None else {"name": choice.name, "reason": choice.reason},
              **evaluated.to_dict()}
    atomic_write(out, json.dumps(result, indent=1, default=str))
    return result


class BeforeEvaluation:
    """The step-wise evaluation before training, run alongside the expert's collection when
    `alongside` (and not done yet), else at once in the foreground; `wait()` returns its result.

    The two use a CPU differently: decoding at batch 1 waits on memory, and the collection's
    scripts run one or two threads with passive waits. Measured in the main job on 2 cores
    (README, "The main job in 21 minutes"): both done 6:00 after the start, against 2:55 + 4:01
    one after the other in the run before the change. The background evaluation shows no bar
    (one live display at a time: the collection's); it says when it starts, what it found, and
    at once if it fails. Its generation is seeded and sees the same states, so its result is
    the one it would give alone (the same to the last digit in those runs) unless one of its
    runs hits the time limit because of the load beside it.
    `stop()` is for a caller that fails first: the evaluation's runs are cancelled and refused
    from then on (StoppableExecutor), so the executor can close; a generation still going ends
    on its own in the thread (a daemon: it does not hold the process), and writes nothing."""

    def __init__(self, plan: Plan, folder: Path, registry: Any, executor: Any, progress: bool, *,
                 alongside: bool):
        self._progress = progress
        self._result: dict[str, Any] | None = None
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        self._executor: StoppableExecutor | None = None
        done = (folder / STEPWISE_DIR / "before.json").is_file()
        wanted = plan.config.stepwise.enabled and bool(plan.eval_tasks)
        if not (alongside and wanted and not done):
            self._result = stepwise_evaluation(plan, folder, plan.config.model.spec, "before", registry, executor,
                                               progress)
            return
        if progress:
            from mleforge.cli.output import err_console

            err_console.print(f"step-wise evaluation (before) of {plan.config.model.spec} on "
                              f"{', '.join(t.id for t in plan.eval_tasks)}: running alongside the expert's "
                              "collection", highlight=False)
        self._executor = StoppableExecutor(executor)
        args = (plan, folder, plan.config.model.spec, "before", registry, self._executor, False)
        self._thread = threading.Thread(target=self._main, args=args, name="mleforge-before-eval", daemon=True)
        self._thread.start()

    def _main(self, *args: Any) -> None:
        try:
            self._result = stepwise_evaluation(*args)
        except BaseException as exc:  # re-raised in the caller's thread by wait()
            self._error = exc
            if self._progress and not isinstance(exc, ExecutorStopped):
                from mleforge.cli.output import err_console

                err_console.print(f"step-wise evaluation (before) failed: {exc}; the run stops when the "
                                  "collection ends", highlight=False)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def wait(self) -> dict[str, Any]:
        if self._thread is not None:
            if self._progress and self._thread.is_alive():
                from mleforge.cli.output import err_console

                with err_console.status("waiting for the step-wise evaluation (before)"):
                    self._thread.join()
            else:
                self._thread.join()
            if self._error is not None:
                raise self._error
            if self._progress:
                self._say()
            self._thread = None
        assert self._result is not None
        return self._result

    def stop(self, timeout: float = 60.0) -> None:
        """Before the executor closes under a failing caller: no run of the evaluation is left
        going (a run takes a moment to end once cancelled)."""
        if self._executor is not None and self.running:
            self._executor.stop(timeout)

    def _say(self) -> None:
        from mleforge.cli.output import err_console

        result = self._result or {}
        metrics, timing = result.get("metrics") or {}, result.get("timing") or {}
        if not result.get("available") or not metrics:
            return
        rate = lambda key: f"{100 * metrics[key]['mean']:.1f}%"  # noqa: E731
        err_console.print(
            f"step-wise evaluation (before): {result.get('n_states')} states, format errors "
            f"{rate('format_error_rate')}, valid {rate('valid_rate')}, mean reward "
            f"{metrics['mean_reward']['mean']:.3f} (generation {timing.get('gen_s', 0):.0f} s)", highlight=False)


def make_local_policy(spec: str, config: TrainConfig) -> Any:
    """A policy of a local model spec for generation outside the trainer (the step-wise
    evaluation), on the run's engine and quantization."""
    from mleforge.policies import make_policy

    options: dict[str, Any] = {"engine": config.stepwise.engine}
    if config.stepwise.quantization is not None:
        options["quantization"] = config.stepwise.quantization
    if config.model.threads is not None:
        options["num_threads"] = config.model.threads
    return make_policy(spec, **options)


# The step-wise evaluations of a run, in order, as their files name them (stepwise/<label>.json)
# and as their tables head them. "sft" is the warm start's model, evaluated where there is one.
STEPWISE_STAGES = (("before", "before"), ("sft", "after SFT"), ("after", "after"))


def stepwise_stages(folder: Path) -> list[tuple[str, Any]] | None:
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


def stepwise_table(folder: Path) -> tuple[tuple[str, ...], list[tuple[str, ...]]] | None:
    """The columns and rows (mleforge.eval.stepwise.compare_stages) of a run's step-wise
    evaluations: before, after the warm start where there was one, after; or None."""
    from mleforge.eval.stepwise import compare_stages

    stages = stepwise_stages(folder)
    return None if stages is None else compare_stages(stages)


def _run(plan: Plan, folder: Path, registry: Any, progress: bool, renderer: Any,
         callbacks: Sequence[Any] = ()) -> TrainResult:
    done = _finished(folder)
    if done is not None:
        return done
    started = time.monotonic()
    config = plan.config
    atomic_write(folder / RUN_RECORD, json.dumps(_record(plan, "running"), indent=1))
    from mleforge.curriculum.buffer import StateBuffer
    from mleforge.curriculum.seeds import set_up_tasks
    from mleforge.tasks.preparation import prepare
    from mleforge.train.journals import expert_journals, load_journals

    for task in (*plan.tasks, *plan.eval_tasks):
        prepare(task)
    executor = _executor(config, folder)
    buffer = StateBuffer(folder, config.buffer, config.learnability)
    before: BeforeEvaluation | None = None
    try:
        # Before anything changes the model: the step-wise evaluation of the model as given. Where
        # the template expert collects, the two run side by side (see BeforeEvaluation).
        auto = config.warm_start_mode == "auto"
        collecting = auto and (sft_done(folder) is None or buffer.sealed_step is None)
        before = BeforeEvaluation(plan, folder, registry, executor, progress, alongside=collecting)
        collected = None
        if collecting:
            collected = collect_expert(plan, folder, registry, executor, progress)
        before.wait()
        if buffer.sealed_step is None:
            ids = [t.id for t in plan.tasks]
            if config.journals is not None:
                journals = load_journals(config.journals, ids)
            elif collected is not None:  # the warm start's expert episodes seed the buffer too
                journals = load_journals(collected.journals_dir, ids)
            else:
                journals = expert_journals(plan.tasks, folder, steps=config.collect.steps, seed=config.seed,
                                           executor=executor, registry=registry)
            set_up_tasks(buffer, plan.tasks, journals, stages=config.seed_stages)
        spec = warm_start(plan, folder, collected, progress)
        if config.warm_start_mode != "none" and config.stepwise.after_sft:  # the warm start's share of the change
            stepwise_evaluation(plan, folder, spec, "sft", registry, executor, progress)
        checkpoint, _ = recover(folder, buffer)
        training = build_trainer(plan, folder, spec, buffer, executor, renderer=renderer, progress=progress)
        trainer = training.trainer
        for callback in callbacks:
            trainer.add_callback(callback)
        try:
            trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)
        finally:
            training.close()
        from mleforge.train.model import save_trained

        final = save_trained(trainer.model, trainer.processing_class, folder / FINAL_DIR,
                             full=training.full, base_spec=training.base_spec)
        record = _record(plan, "running")
        (final / CHECKPOINT_RECORD).write_text(json.dumps(record, indent=1), encoding="utf-8")
        steps_done = trainer.state.global_step
        del trainer, training  # the training model's memory, before the evaluation loads the result
        stepwise_evaluation(plan, folder, f"hf:{final}", "after", registry, executor, progress)
    finally:
        if before is not None:
            before.stop()  # a failure while it ran alongside: none of its runs outlives the executor
        buffer.close()
        executor.close()
    wall = round(time.monotonic() - started, 1)
    atomic_write(folder / RUN_RECORD, json.dumps(_record(
        plan, "done", steps_done=steps_done, final_model=str(final), wall_s=wall,
        report=str(folder / "report" / "report.html")), indent=1))
    from mleforge.eval.report import write_report

    written = write_report([folder], folder / "report")
    return TrainResult(str(folder), steps_done, str(final), written.html, wall)


@dataclass
class Training:
    """A run's trainer and the parts attached to it."""

    trainer: Any  # CurriculumGRPOTrainer
    reward: Any  # ExecutingReward
    feed: Any  # CurriculumFeed
    progress: Any
    full: bool
    base_spec: str
    rollout: Any = None  # the engine's rollout_func (generation ct2 ...); None for TRL's own

    def close(self) -> None:
        from mleforge.train.generation import close_rollout

        # Each part is closed whatever the one before raised: the rollout engine's scratch
        # weights (gigabytes under <run>/ct2-rollouts/) must go even when the reward's close fails.
        try:
            self.progress.close()
        finally:
            try:
                self.reward.close()
            finally:
                close_rollout(self.rollout)


def build_trainer(plan: Plan, folder: Path, spec: str, buffer: Any, executor: Any, *, renderer: Any = None,
                  progress: bool = True) -> Training:
    """The CurriculumGRPOTrainer of a run, with its reward, feed and callbacks attached."""
    import trl
    from accelerate import PartialState
    from datasets import Dataset
    from transformers import PrinterCallback, ProgressCallback

    from mleforge.curriculum.config import SamplerConfig
    from mleforge.curriculum.sampler import make_sampler
    from mleforge.train.feed import CurriculumFeed, placeholder_rows
    from mleforge.train.feedback import FeedbackCallback
    from mleforge.train.generation import rollout_func_for, trl_generation_args
    from mleforge.train.model import load_for_training
    from mleforge.train.progress import progress_callback
    from mleforge.train.prompts import make_renderer
    from mleforge.train.rewards import ExecutingReward
    from mleforge.train.trainer import CurriculumGRPOTrainer

    config = plan.config
    loaded = load_for_training(replace(config.model, spec=spec))
    loaded.tokenizer.padding_side = "left"  # TRL generates from left-padded prompts
    tasks = {t.id: t for t in plan.tasks}
    sampler = make_sampler(SamplerConfig(kind=config.sampler, group_size=config.group_size, seed=config.seed),
                           config.learnability)
    feed = CurriculumFeed(buffer, sampler, tasks, renderer or make_renderer(config.prompt), config.groups_per_step)
    rank = PartialState().process_index
    reward = ExecutingReward(tasks, executor, feed.states, reward=config.reward, timeout_s=config.sandbox.run_timeout_s,
                             feedback=config.feedback,
                             max_workers=_workers(config, plan.tasks), rank=rank)
    steps_per_generation = config.sequences_per_step // (config.micro_batch * plan.world_size)
    args = trl.GRPOConfig(
        output_dir=str(folder / CHECKPOINTS_DIR), max_steps=config.steps, per_device_train_batch_size=config.micro_batch,
        gradient_accumulation_steps=steps_per_generation, steps_per_generation=steps_per_generation,
        num_generations=config.group_size, num_iterations=1, learning_rate=config.lr,
        lr_scheduler_type=config.lr_scheduler, beta=config.beta, loss_type=config.loss_type,
        scale_rewards=config.scale_rewards, max_grad_norm=config.max_grad_norm, shuffle_dataset=False,
        logging_steps=1, save_strategy="steps", save_steps=config.save_steps, save_total_limit=config.save_total_limit,
        report_to="none", disable_tqdm=True, bf16=bool(config.bf16), fp16=False, seed=config.seed,
        data_seed=config.seed, gradient_checkpointing=config.model.gradient_checkpointing,
        use_cpu=loaded.device == "cpu", remove_unused_columns=False, log_completions=False, disable_dropout=True,
        dataloader_num_workers=0, **trl_generation_args(config, config.generation.backend),
    )
    rollout = rollout_func_for(config.generation.backend, config, loaded.tokenizer)
    trainer = CurriculumGRPOTrainer(
        model=loaded.model, reward_funcs=[reward], args=args,
        train_dataset=Dataset.from_list(placeholder_rows(config.groups_per_step)),
        processing_class=loaded.tokenizer, peft_config=loaded.peft_config, rollout_func=rollout,
        feed=feed, run_seed=config.seed, prompt_grad=config.model.prompt_grad,
    )
    for printer in (PrinterCallback, ProgressCallback):  # our own bar and metrics.jsonl instead
        trainer.remove_callback(printer)
    bar = progress_callback(f"train {spec}", enabled=progress)
    record = _record(plan, "running")
    for callback in (
        bar,
        FeedbackCallback(trainer=trainer, buffer=buffer, feed=feed, reward=reward, run_dir=folder,
                         grow=config.buffer_growth, progress=bar),
        checkpoint_callback(full=loaded.full, base_spec=loaded.base_spec, run_record=record,
                            state=lambda s: {"buffer_step": s.global_step - 1}),
    ):
        trainer.add_callback(callback)

    return Training(trainer, reward, feed, bar, loaded.full, loaded.base_spec, rollout)
