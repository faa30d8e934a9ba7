"""GRPO rollouts on the CTranslate2 engine: `generation: ct2` (extra `[fast]`).

TRL calls the rollout once per step's generation with this rank's rows (chat messages,
each group's prompt `group_size` times in a row) and the trainer:

    rollout = Ct2Rollout(config, tokenizer)       # mleforge.train.grpo.generation builds it
    out = rollout(prompts, trainer)               # {"prompt_ids", "completion_ids", "logprobs"}
    rollout.take_figures(step)                    # {"sync_s": ..., "rollout_staleness": ...}

1. Sync. The engine holds a converted copy of the trainer's model (LoRA merged; the model is
   left as it is: mleforge.policies.engines.ct2.refresh_engine). It is built at the first
   generation and converted again at every step that is a multiple of `sync_every` (1:
   after each optimizer step). Which weights a step samples from is a function of the step
   alone, and `TrainConfig` keeps checkpoints on sync steps, so a resumed run samples from
   the weights the uninterrupted run did. After a step's rollouts the engine lets its
   weights go when the next step syncs anyway (sync_every 1: every step), so the update never
   runs beside an idle float32 copy of the model; with a longer sync_every they stay loaded.
   The other way round, on a CPU the training model's frozen weights leave the resident set
   while the engine generates where they are a file's pages (memory-mapped, never written:
   mleforge.utils.memory.release_file_pages, and mleforge.train.model for a checkpoint's merged
   weights); the update reads them back from the page cache.
2. Prompts. Each prompt is rendered with the training tokenizer's chat template as TRL
   renders its own; a run of identical rows (a group) is one input with `group_size`
   samples, so its prompt is prefilled once (its keys and values are then held once per
   sample: mleforge.policies.engines.ct2).
3. Seeds. The trainer seeds torch's RNG with the step's seed before generating
   (mleforge.train.grpo.trainer); that seed, `torch.initial_seed()`, seeds the engine: the same
   step of the same run samples the same completions, resumed or not.
4. Weights. TRL 1.16 applies its importance-sampling correction
   (`vllm_importance_sampling_correction`: the ratio of the training model's to the
   sampler's probability of each sampled token, truncated or masked) only when `use_vllm`
   is on; for a `rollout_func` without vLLM the logprobs it returns are used by the
   off-policy sequence mask alone (`off_policy_mask_threshold`, off by default) and the loss
   treats the samples as the training model's own. So the rollouts sample from the training
   weights' own type by default (float32 on a CPU), and `rollout_quantization: int8`
   (faster, and further from the training distribution, uncorrected) is a choice to make
   knowingly (the logprobs it returns against the trainer's show the distance). When the
   quantization differs from the training weights, the per-token logprobs (at temperature 1,
   as ctranslate2 scores them) go back to TRL.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from mleforge.policies.base import SamplingConfig
from mleforge.policies.engines.ct2 import Ct2Engine, refresh_engine
from mleforge.utils.memory import release_file_pages, release_memory

if TYPE_CHECKING:
    from mleforge.train.config import TrainConfig

log = logging.getLogger(__name__)
# The ct2 weight type that is the training weights' own, by torch dtype.
SAME_TYPE = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}


def group_runs(rows: list[Any]) -> list[tuple[int, int]]:
    """(first row, length) of each run of equal consecutive rows: TRL's group layout puts a
    group's `num_generations` rows in a row."""
    runs: list[tuple[int, int]] = []
    for i, row in enumerate(rows):
        if runs and rows[runs[-1][0]] == row:
            runs[-1] = (runs[-1][0], runs[-1][1] + 1)
        else:
            runs.append((i, 1))
    return runs


def due_for_sync(step: int, synced_step: int | None, every: int) -> bool:
    """Whether step `step`'s rollouts need the current weights: the first generation, and
    every `every`-th step (the weights of step s are those after s optimizer steps)."""
    return synced_step is None or (step != synced_step and step % every == 0)


def rollout_folder(trainer: Any) -> Path | None:
    """Where a rank's converted weights live: <run>/ct2-rollouts/rank-<i> beside the run's
    checkpoints folder (TRL's output_dir), so that the conversions a SIGKILL left behind (a
    float32 Qwen-0.5B is 2 GB) are deleted when the run resumes; None (the system's temporary
    directory) for a trainer with no output folder."""
    output = getattr(getattr(trainer, "args", None), "output_dir", None)
    if not output:
        return None
    return Path(output).resolve().parent / "ct2-rollouts" / f"rank-{trainer.accelerator.process_index}"


class Ct2Rollout:
    """TRL's `rollout_func` on a ct2 engine that follows the trainer's weights (see the module
    docstring). `config` is the run's TrainConfig; `tokenizer` the training tokenizer."""

    def __init__(self, config: TrainConfig, tokenizer: Any):
        from mleforge.policies.extras import import_ctranslate2

        import_ctranslate2()  # the error that names [fast], before a model is converted
        self.tokenizer = tokenizer
        self.quantization: str | None = config.generation.rollout_quantization  # None: the training weights' own type
        self.sync_every = config.generation.sync_every
        self.threads = config.model.threads
        self.sampling = SamplingConfig(temperature=config.temperature, top_p=config.top_p,
                                       max_new_tokens=config.max_new_tokens, seed=None)
        self.engine: Ct2Engine | None = None
        self.synced_step: int | None = None
        self.logprobs = False  # whether the engine's weights differ in type from the training model's
        self._figures: dict[int, dict[str, float]] = {}
        self.temp_root: Path | None = None  # where the engine's conversions live (rollout_folder)
        self._told = False  # whether the frozen weights' release was logged at INFO (once)

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, Any]:
        step = trainer.state.global_step
        if self.engine is None:
            self.temp_root = rollout_folder(trainer)
        model = trainer.accelerator.unwrap_model(trainer.model)
        sync_s = self.refresh(model, step, trainer.accelerator.device)
        if torch.device(trainer.accelerator.device).type == "cpu":  # the engine holds its own copy
            released = release_file_pages(p for p in model.parameters() if not p.requires_grad)
            log.log(logging.DEBUG if self._told or not released else logging.INFO,
                    "step %d: %.0f MiB of frozen weights out of the resident set while the rollouts generate",
                    step, released / 2**20)
            self._told = self._told or bool(released)
        prompt_ids = [self.encode(p, trainer) for p in prompts]
        seed = torch.initial_seed() % 2**32  # the trainer's step seed (mleforge.train.grpo.trainer)
        runs = group_runs(prompt_ids)
        completion_ids: list[list[int]] = [[] for _ in prompt_ids]
        logprobs: list[list[float]] = [[] for _ in prompt_ids]
        engine: Ct2Engine = self.engine  # type: ignore[assignment]  (refresh built it)
        # One call per group size (one in TRL's layout): each group a single input of n samples.
        for n in sorted({length for _, length in runs}):
            starts = [start for start, length in runs if length == n]
            made = engine.generate([prompt_ids[s] for s in starts], n, self.sampling, seed, logprobs=self.logprobs)
            for start, samples in zip(starts, made.samples):
                for k, sample in enumerate(samples):
                    completion_ids[start + k] = list(sample.token_ids)
                    logprobs[start + k] = list(sample.logprobs or ())
        self._figures[step] = {"sync_s": round(sync_s, 3), "rollout_staleness": step - (self.synced_step or 0)}
        if due_for_sync(step + 1, self.synced_step, self.sync_every):
            engine.release()  # the next step converts new weights: none of these is used again
        else:
            release_memory()  # what generating freed, before the update allocates its activations
        return {"prompt_ids": prompt_ids, "completion_ids": completion_ids,
                "logprobs": logprobs if self.logprobs else None}

    def refresh(self, model: Any, step: int, device: Any) -> float:
        """Hand the model's weights to the engine if step `step` is due (see due_for_sync);
        the seconds it took (0 when not due)."""
        started = time.perf_counter()
        if not due_for_sync(step, self.synced_step, self.sync_every):
            if self.engine is not None and self.engine.released:  # a step's rollouts asked for again
                self.engine.reload()
                return time.perf_counter() - started
            return 0.0
        if self.engine is None:
            trained = SAME_TYPE.get(next(model.parameters()).dtype, "float32")
            quantization = self.quantization or trained
            root = self.temp_root
            if root is not None:  # what a killed process of this run and rank left: never loaded again
                shutil.rmtree(root, ignore_errors=True)
            # The device with its index: each rank of a multi-GPU launch samples on its own GPU.
            self.engine, _ = refresh_engine(model, self.tokenizer, quantization=quantization,
                                            device=str(torch.device(device)), num_threads=self.threads,
                                            temp_root=root)
            self.logprobs = quantization != trained
            if self.logprobs:
                log.warning("ct2 rollouts sample from %s weights while training holds %s ones; TRL 1.16 corrects "
                            "for that only on its vLLM path, so the samples count as the training model's own "
                            "(rollout_quantization: null samples from the training weights' type)",
                            quantization, trained)
        else:
            refresh_engine(model, self.tokenizer, self.engine)  # same quantization, device and threads
        self.synced_step = step
        return time.perf_counter() - started

    def encode(self, prompt: Any, trainer: Any) -> list[int]:
        """The prompt's ids as TRL renders a conversational prompt for its own generation."""
        if isinstance(prompt, str):
            return self.tokenizer(prompt, add_special_tokens=False)["input_ids"]
        encoded = self.tokenizer.apply_chat_template(
            prompt, chat_template=getattr(trainer, "chat_template", None), add_generation_prompt=True,
            tokenize=True, return_dict=True, **(getattr(trainer, "chat_template_kwargs", None) or {}))
        return list(encoded["input_ids"])

    def take_figures(self, step: int) -> dict[str, float]:
        return self._figures.pop(step, {})

    def close(self) -> None:
        """Release the engine and delete this rank's conversions folder (rollout_folder), and
        <run>/ct2-rollouts/ once no rank's folder is left in it: a finished run keeps no
        scratch weights (2 GB for a float32 Qwen-0.5B)."""
        if self.engine is not None:
            self.engine.close()
            self.engine = None
            self.synced_step = None
        if self.temp_root is not None:
            shutil.rmtree(self.temp_root, ignore_errors=True)
            with contextlib.suppress(OSError):  # another rank's folder still in it: that rank removes it
                self.temp_root.parent.rmdir()
