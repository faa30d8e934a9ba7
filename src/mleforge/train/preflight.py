"""Preflight of `mleforge train`: every check that needs no model, before anything heavy starts.

    plan = preflight(config, registry)   # the extras, the model spec, the tasks, the warm start,
                                         # this machine; raises with the reason and the fix

The Plan it returns is the run's config with its `auto` values decided for this machine (the
generation engine, bf16), the training and evaluation tasks, the model's source, the device
and the number of processes (mleforge.train.plan).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from mleforge.expert.episodes import JOURNAL_FILE
from mleforge.policies.model_source import ModelSource
from mleforge.tasks.task import Task
from mleforge.train.config import TrainConfig
from mleforge.train.errors import TrainError
from mleforge.train.model import check_model, require_train_extra
from mleforge.train.plan import Plan
from mleforge.train.tracking import require_tracker
from mleforge.train.warm_start import collect_config, sft_model_folder

if TYPE_CHECKING:
    from mleforge.tasks.registry import TaskRegistry

GROUP_SELECTORS = ("lite", "all")  # task selectors the eval tasks are taken out of


def preflight(config: TrainConfig, registry: TaskRegistry) -> Plan:
    """Check everything that can be checked before loading a model (see the module docstring)."""
    require_train_extra("mleforge train")
    require_tracker(config.report_to, "mleforge train")
    tasks, eval_tasks = _select_tasks(config, registry)
    source = check_model(config.model)
    _check_warm_start(config, tasks)
    import torch

    from mleforge.train.grpo.generation import resolve_generation
    from mleforge.train.model import resolve_bf16, resolve_device
    from mleforge.train.ranks import process_ranks

    device = resolve_device(torch, config.model.device)
    world = process_ranks(device).count  # the processes `accelerate launch` started (1 without it)
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


def _select_tasks(config: TrainConfig, registry: TaskRegistry) -> tuple[tuple[Task, ...], tuple[Task, ...]]:
    """The training and the evaluation tasks: apart, and the training ones not empty."""
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
    return tasks, eval_tasks


def _check_warm_start(config: TrainConfig, tasks: tuple[Task, ...]) -> None:
    """--sft auto's collect, --sft PATH's model and --journals' folder, checked."""
    if config.warm_start_mode == "auto":
        collect_config(config, tasks)  # its prompt must be the run's (below)
    if config.warm_start_mode == "path":
        folder = sft_model_folder(config.warm_start)
        if not folder.is_dir():
            raise TrainError(f"--sft {config.warm_start}: no such folder; give an `mleforge sft` run (or its model/)")
        check_model(replace(config.model, spec=f"hf:{folder}"))
    if config.journals is not None:
        journal_files(config.journals)


def journal_files(folder: str | Path) -> list[Path]:
    """The journal files under `--journals` (at least one)."""
    folder = Path(folder).expanduser()
    if not folder.is_dir():
        raise TrainError(f"--journals {folder}: not a folder; give a folder of collected runs (mleforge collect)")
    files = sorted(folder.rglob(JOURNAL_FILE))
    if not files:
        raise TrainError(f"--journals {folder}: no {JOURNAL_FILE} under it; run `mleforge collect` first, "
                         "or leave --journals out to let the template expert make them")
    return files


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
