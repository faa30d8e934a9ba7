"""`mleforge sft`: fine-tune a model on expert samples (ML-Agent's exploration-enriched SFT).

TRL's SFTTrainer (its LM head on the completion positions on a CPU: mleforge.train.sft_trainer)
on the samples (mleforge.train.samples), the loss on the completion only
(the action given the state), LoRA by default or every weight, on a CPU or a GPU. The run
directory holds

    run.json          kind "sft", the tasks the samples came from (the contamination guard
                      reads them), the model, the sample counts, the loss before and after
    config.yaml       the full SFTRunConfig
    metrics.jsonl     one line per optimizer step: step, loss, learning rate
    tensorboard/      with --report-to tensorboard: TRL's figures (mleforge.train.tracking)
    checkpoints/      TRL checkpoints (resumed from when the command runs again)
    model/            the result: the adapter (or the whole model), its tokenizer and the
                      marker naming the base; `hf:<run>/model` loads it

Running the same command again resumes from the last complete checkpoint.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console

from mleforge.config import changed_paths
from mleforge.runs import CHECKPOINT_RECORD, CHECKPOINTS_DIR, MODEL_DIR, RUN_RECORD
from mleforge.train.checkpoint_marks import checkpoint_callback, last_checkpoint
from mleforge.train.config import SFTRunConfig, upgrade_sft_run_dict
from mleforge.train.errors import TrainError
from mleforge.train.model import (
    TrainableModel,
    check_model,
    load_for_training,
    require_train_extra,
    resolve_bf16,
    save_trained,
)
from mleforge.train.samples import SFTSample, fit_samples, read_samples, tasks_of
from mleforge.train.tracking import attach, require_tracker, trainer_args
from mleforge.utils.atomic import atomic_write
from mleforge.utils.quiet import quiet_libraries


@dataclass(frozen=True)
class SFTResult:
    run_dir: str
    model_dir: str
    samples: int
    dropped_long: int
    steps: int
    loss_before: float
    loss_after: float
    wall_s: float

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def completion_loss(model: Any, tokenizer: Any, samples: Sequence[SFTSample]) -> float:
    """Mean negative log-likelihood per completion token of `samples` (the SFT objective),
    with the model in eval mode and no gradients; the vocabulary projection on the completion's
    positions only."""
    import torch

    total, count = 0.0, 0
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad(), quiet_libraries():
            for sample in samples:
                prompt = tokenizer.apply_chat_template(list(sample.prompt), add_generation_prompt=True,
                                                       tokenize=True, return_dict=True)["input_ids"]
                full = tokenizer.apply_chat_template([*sample.prompt, *sample.completion], tokenize=True,
                                                     return_dict=True)["input_ids"]
                n = len(full) - len(prompt)
                if n <= 0:
                    continue
                ids = torch.tensor([full], device=model.device)
                # The logits of the completion's positions only: the one before each completion token.
                logits = model(input_ids=ids, logits_to_keep=n + 1, use_cache=False).logits[0, :-1]
                total += float(torch.nn.functional.cross_entropy(logits.float(), ids[0, -n:], reduction="sum"))
                count += n
    finally:
        model.train(was_training)
    if not count:
        raise TrainError("no sample has a completion token after its prompt; check the chat template")
    return total / count


def loss_subset(samples: Sequence[SFTSample], size: int, seed: int) -> list[SFTSample]:
    """The samples the loss before and after is measured on: all of them, or a seeded `size`."""
    if len(samples) <= size:
        return list(samples)
    return random.Random(seed).sample(list(samples), size)


def _metrics_callback(path: Path) -> Any:
    from transformers import TrainerCallback

    class LossLog(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            if state.is_world_process_zero and logs and "loss" in logs:
                line = {"step": state.global_step, "loss": logs["loss"], "learning_rate": logs.get("learning_rate")}
                with open(path, "a", encoding="utf-8") as handle:
                    handle.write(json.dumps(line) + "\n")

    return LossLog()


def run_sft(config: SFTRunConfig, *, progress: bool = True, console: Console | None = None) -> SFTResult:
    """Fine-tune `config.model` on `config.samples` into `config.out` (see the module
    docstring); resumes from the run's last complete checkpoint."""
    started = time.monotonic()
    require_train_extra("mleforge sft")
    require_tracker(config.report_to, "mleforge sft")
    samples = read_samples(config.samples, config.stages)  # malformed samples are refused before loading
    check_model(config.model)
    run_dir = Path(config.out).expanduser().resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    _check_same_run(run_dir, config)
    done = finished_sft(run_dir)
    if done is not None:  # the same command again, after the run ended: nothing to redo
        return done

    from datasets import Dataset

    loaded = load_for_training(config.model)
    kept, dropped = fit_samples(samples, loaded.tokenizer, config.sft.max_length)
    if not kept:
        raise TrainError(f"every sample is longer than max_length={config.sft.max_length} tokens; raise "
                         "--max-length or collect with a compact prompt")
    subset = loss_subset(kept, config.sft.loss_samples, config.seed)
    loss_before = completion_loss(loaded.model, loaded.tokenizer, subset)
    tasks = tasks_of(kept)
    record = {"kind": "sft", "tasks": tasks, "model": config.model.spec, "samples": len(kept),
              "dropped_long": dropped, "samples_path": str(Path(config.samples).expanduser().resolve())}
    atomic_write(run_dir / RUN_RECORD, json.dumps({**record, "status": "running"}, indent=1))
    dataset = Dataset.from_list([{"prompt": list(s.prompt), "completion": list(s.completion)} for s in kept])
    with quiet_libraries():  # TRL's and transformers' warnings, datasets' bars
        trainer = sft_trainer(config, loaded, dataset, run_dir / CHECKPOINTS_DIR)
    attach(trainer, run_dir)
    from transformers import PrinterCallback, ProgressCallback

    from mleforge.train.progress import progress_callback

    for printer in (PrinterCallback, ProgressCallback):  # our own bar and metrics.jsonl instead
        trainer.remove_callback(printer)

    bar = progress_callback(f"sft {config.model.spec}", enabled=progress, console=console)
    for callback in (bar, _metrics_callback(run_dir / "metrics.jsonl"),
                     checkpoint_callback(full=loaded.full, base_spec=loaded.base_spec, run_record=record)):
        trainer.add_callback(callback)
    resume = last_checkpoint(run_dir / CHECKPOINTS_DIR)
    try:
        with quiet_libraries():
            trainer.train(resume_from_checkpoint=str(resume) if resume else None)
    finally:
        bar.close()
    model_dir = save_trained(trainer.model, loaded.tokenizer, run_dir / MODEL_DIR, full=loaded.full,
                             base_spec=loaded.base_spec)
    loss_after = completion_loss(trainer.model, loaded.tokenizer, subset)
    result = SFTResult(str(run_dir), str(model_dir), len(kept), dropped, trainer.state.global_step,
                       loss_before, loss_after, round(time.monotonic() - started, 2))
    final = {**record, "status": "done", "steps": result.steps, "loss_before": loss_before,
             "loss_after": loss_after, "wall_s": result.wall_s}
    (model_dir / CHECKPOINT_RECORD).write_text(json.dumps(final, indent=1), encoding="utf-8")
    atomic_write(run_dir / RUN_RECORD, json.dumps(final, indent=1))
    return result


def sft_trainer(config: SFTRunConfig, loaded: TrainableModel, dataset: Any, output_dir: Path) -> Any:
    """The trainer `run_sft` trains with: TRL's SFTTrainer with the completion-only head on a
    CPU (mleforge.train.sft_trainer), `config`'s schedule, bf16 where the device computes it."""
    import trl

    from mleforge.train.sft_trainer import CompletionSFTTrainer

    bf16 = resolve_bf16(config.sft.bf16, loaded.device, _torch())
    args = trl.SFTConfig(
        output_dir=str(output_dir), num_train_epochs=config.sft.epochs,
        max_steps=config.sft.max_steps or -1, learning_rate=config.sft.lr, lr_scheduler_type="cosine",
        per_device_train_batch_size=config.sft.batch_size, gradient_accumulation_steps=config.sft.grad_accum,
        max_length=None,  # too-long samples were left out above; none is cut
        completion_only_loss=True, logging_steps=1, save_steps=config.sft.save_steps, save_total_limit=2,
        **trainer_args(config.report_to, output_dir.parent), disable_tqdm=True, bf16=bf16, fp16=False, seed=config.seed, data_seed=config.seed,
        gradient_checkpointing=config.model.gradient_checkpointing, use_cpu=loaded.device == "cpu",
        dataset_num_proc=None,
    )
    return CompletionSFTTrainer(model=loaded.model, args=args, train_dataset=dataset,
                                processing_class=loaded.tokenizer, peft_config=loaded.peft_config,
                                prompt_grad=config.model.prompt_grad)


def finished_sft(run_dir: Path) -> SFTResult | None:
    """The result of the finished `mleforge sft` run in `run_dir`; None where there is none, or
    it has not finished (a resumed `mleforge train` skips a warm start that has)."""
    try:
        record = json.loads((run_dir / RUN_RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if record.get("status") != "done" or not (run_dir / MODEL_DIR / CHECKPOINT_RECORD).is_file():
        return None
    return SFTResult(str(run_dir), str(run_dir / MODEL_DIR), record["samples"], record["dropped_long"],
                     record["steps"], record["loss_before"], record["loss_after"], record["wall_s"])


def _torch() -> Any:
    import torch

    return torch


def _check_same_run(run_dir: Path, config: SFTRunConfig) -> None:
    """A run directory holds one run: the same config resumes it, another one is refused
    (where its curves go, report_to, may change: it changes nothing the run computes)."""
    path = run_dir / "config.yaml"
    data = config.to_dict()
    if path.is_file():
        # A run written before the config tree, or before a setting existed, reads as it ran.
        saved = upgrade_sft_run_dict(yaml.safe_load(path.read_text(encoding="utf-8")))
        saved["report_to"] = data["report_to"]
        if saved != data:
            changed = changed_paths(saved, data)
            raise TrainError(f"{run_dir} holds another SFT run (different {', '.join(changed)}); "
                             "pass another --out, or the same settings to resume it")
        return
    atomic_write(path, yaml.safe_dump(data, sort_keys=False))
