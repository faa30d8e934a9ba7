"""The transformers engine: `model.generate` on a local causal LM (LoRA merged), and its loader.

It is what a trainer's own model generates with, and what every architecture runs on; the
ct2 engine converts from the model this module loads. torch and transformers are imported
when a model loads, never at import time.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mleforge.errors import MissingExtra
from mleforge.policies.base import PolicyError, SamplingConfig, cut_at_stop, derive_seed
from mleforge.policies.engines.base import Generation, Sample
from mleforge.policies.extras import import_torch_transformers
from mleforge.policies.model_source import is_adapter_folder, read_marker, resolve_model
from mleforge.utils.quiet import quiet_libraries

if TYPE_CHECKING:
    from mleforge.policies.hf_config import HFConfig


class TransformersEngine:
    """Samples with `model.generate`, `max_batch_size` sequences (prompts x samples) at a time.

    `num_threads` sets torch's CPU threads while it generates (restored after); on a CPU
    shared with other work, 1 thread can be several times faster than OpenMP's default of one
    per core, whose threads wait on each other whenever one is preempted.
    """

    name = "transformers"

    def __init__(self, model: Any, tokenizer: Any, *, max_batch_size: int = 16,
                 num_threads: int | None = None):
        self._torch, _ = import_torch_transformers()
        self._model, self._tokenizer = model, tokenizer
        self._max_batch_size, self._num_threads = max_batch_size, num_threads
        self.eos_ids = eos_token_ids(getattr(model, "generation_config", None), tokenizer)
        self._pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None \
            else self.eos_ids[0]

    @property
    def model(self) -> Any:
        return self._model

    @property
    def device(self) -> str:
        return str(next(self._model.parameters()).device)

    @property
    def context_length(self) -> int | None:
        return getattr(self._model.config, "max_position_embeddings", None)

    def describe(self) -> dict[str, Any]:
        return {"engine": self.name, "device": self.device,
                "dtype": str(next(self._model.parameters()).dtype).removeprefix("torch.")}

    def close(self) -> None:
        cuda = self._model is not None and self.device.startswith("cuda")
        self._model = None
        if cuda:
            self._torch.cuda.empty_cache()

    def generate(self, prompts: Sequence[Sequence[int]], n: int, sampling: SamplingConfig,
                 seed: int, *, logprobs: bool = False) -> Generation:
        """`n` samples per prompt; `logprobs` is not available here (TRL computes its own
        from the model, so the samples' `logprobs` stay None)."""
        samples: list[list[Sample]] = [[] for _ in prompts]
        plan = plan_batches(len(prompts), n, self._max_batch_size)
        prompt_tokens, latency = 0, 0.0
        for step, (indices, count) in enumerate(plan):
            batch = self._generate_batch([prompts[i] for i in indices], count, sampling,
                                         derive_seed(seed, step))
            for i, got in zip(indices, batch):
                samples[i].extend(got)
            prompt_tokens += sum(len(prompts[i]) for i in indices)
            latency += batch[0][0].latency_s
        return Generation(samples, len(plan), prompt_tokens, latency)

    def _generate_batch(self, prompts: list[Sequence[int]], count: int, sampling: SamplingConfig,
                        seed: int) -> list[list[Sample]]:
        """`count` samples for each prompt, generated together: one forward pass per token."""
        torch = self._torch
        encoded = self._tokenizer.pad({"input_ids": [list(p) for p in prompts]}, padding=True,
                                      padding_side="left", return_tensors="pt")
        encoded = encoded.to(self._model.device)
        options: dict[str, Any] = {"max_new_tokens": sampling.max_new_tokens,
                                   "num_return_sequences": count, "pad_token_id": self._pad_id,
                                   "eos_token_id": self.eos_ids, "do_sample": not sampling.greedy}
        if not sampling.greedy:
            # top_k=0: transformers would otherwise add its own top-50 default; the sampling
            # config alone decides, as it does on an OpenAI-compatible server.
            options.update(temperature=sampling.temperature, top_p=sampling.top_p, top_k=0)
        if sampling.stop:
            options.update(stop_strings=list(sampling.stop), tokenizer=self._tokenizer)
        cuda = [self._model.device] if self._model.device.type == "cuda" else []
        threads = torch.get_num_threads()
        started = time.perf_counter()
        # fork_rng: seeding must not disturb the caller's own torch random state.
        with torch.random.fork_rng(devices=cuda), torch.inference_mode(), quiet_libraries():
            torch.manual_seed(seed)
            if self._num_threads:
                torch.set_num_threads(self._num_threads)
            try:
                output = self._model.generate(**encoded, **options)
            finally:
                torch.set_num_threads(threads)
        latency = time.perf_counter() - started

        rows = output[:, encoded["input_ids"].shape[1]:].tolist()
        batch: list[list[Sample]] = [[] for _ in prompts]
        for row, tokens in enumerate(rows):
            # generate orders rows prompt-major: p0s0, p0s1, ..., p1s0
            used, reason = self._row_end(tokens, sampling.stop)
            batch[row // count].append(Sample(tuple(used), reason, latency))
        return batch

    def _row_end(self, tokens: list[int], stop: Sequence[str]) -> tuple[list[int], str]:
        ends = [i for i, t in enumerate(tokens) if t in self.eos_ids or t == self._pad_id]
        end = ends[0] if ends else len(tokens)
        stopped = bool(stop) and cut_at_stop(
            self._tokenizer.decode(tokens[:end], skip_special_tokens=True), stop)[1]
        return row_end(tokens, self.eos_ids, self._pad_id, stopped)


def row_end(tokens: Sequence[int], eos_ids: Sequence[int], pad_id: int,
            stopped: bool) -> tuple[list[int], str]:
    """The tokens of one generated row that count, and why it ended.

    A row ends at its first end-of-sequence or padding token. An end-of-sequence token the
    model generated counts, unless a stop string (`stopped`: found in the text before that
    point) had already ended the row, after which generate only pads, with the pad id or,
    when the model has none, the end-of-sequence id.
    """
    ends = [i for i, t in enumerate(tokens) if t in eos_ids or t == pad_id]
    end = ends[0] if ends else len(tokens)
    if stopped or end < len(tokens):
        generated_eos = not stopped and end < len(tokens) and tokens[end] in eos_ids
        return list(tokens[:end + (1 if generated_eos else 0)]), "stop"
    return list(tokens), "length"


def plan_batches(prompts: int, samples: int, max_batch_size: int) -> list[tuple[list[int], int]]:
    """Group work into (prompt indices, samples each) with at most `max_batch_size` sequences.

    generate() asks the same number of samples of every prompt in a batch, so a prompt that
    needs more samples than fit in one batch gets several batches of its own.
    """
    if samples >= max_batch_size:
        return [([i], min(max_batch_size, samples - done))
                for i in range(prompts) for done in range(0, samples, max_batch_size)]
    per_batch = max_batch_size // samples
    return [(list(range(start, min(start + per_batch, prompts))), samples)
            for start in range(0, prompts, per_batch)]


def eos_token_ids(generation_config: Any, tokenizer: Any) -> tuple[int, ...]:
    """The ids that end an answer: the generation config's (one or a list) and the tokenizer's."""
    configured = getattr(generation_config, "eos_token_id", None)
    ids = configured if isinstance(configured, list) else [configured]
    ids = [i for i in [*ids, tokenizer.eos_token_id] if i is not None]
    if not ids:
        raise PolicyError("the model declares no end-of-sequence token; cannot tell where an "
                          "answer ends")
    return tuple(dict.fromkeys(ids))


# --- loading ---


def load_model(config: HFConfig, *, device: str | None = None,
               dtype: str | None = None) -> tuple[Any, Any]:
    """The model of `config` (adapter merged) and its tokenizer, in eval mode on its device.

    `device` and `dtype` override the config's (conversion loads on the CPU in float32).
    """
    torch, transformers = import_torch_transformers()
    device = resolve_device(torch, device or config.device)
    torch_dtype = _dtype(torch, dtype or config.dtype, device)
    source, options, adapters, tokenizer_source = checkpoint_sources(config)
    try:
        with quiet_libraries():  # their loading bars and warnings about their own APIs
            tokenizer = transformers.AutoTokenizer.from_pretrained(tokenizer_source, **options)
            model = transformers.AutoModelForCausalLM.from_pretrained(source, dtype=torch_dtype, **options)
    except OSError as exc:
        raise _not_found(config, exc) from None
    with quiet_libraries():
        for adapter in adapters:
            model = _with_adapter(model, adapter)
    model.to(device)
    model.eval()
    return model, tokenizer


def load_tokenizer(config: HFConfig) -> Any:
    _, transformers = import_torch_transformers()
    _, options, _, tokenizer_source = checkpoint_sources(config)
    try:
        return transformers.AutoTokenizer.from_pretrained(tokenizer_source, **options)
    except OSError as exc:
        raise _not_found(config, exc) from None


def resolve_device(torch: Any, requested: str) -> str:
    if requested != "auto":
        return requested
    if torch.cuda.is_available():
        return "cuda"
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return "mps"
    return "cpu"


def _dtype(torch: Any, requested: str, device: str) -> Any:
    if requested != "auto":
        return getattr(torch, requested)
    if device.startswith("cuda"):
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    if device == "mps":
        return torch.float16
    return torch.float32


def model_source(config: HFConfig) -> tuple[str, dict[str, Any]]:
    """What `from_pretrained` gets: a local folder, or a hub id (cache only unless download)."""
    options = {"trust_remote_code": config.trust_remote_code}
    path = Path(config.model).expanduser()
    if path.is_dir():
        return str(path), options
    if path.exists() or config.model.startswith((".", "/", "~")):
        raise PolicyError(f"{config.model} is not a model folder (a directory with config.json "
                          f"and weights)")
    return config.model, {**options, "local_files_only": not config.download}


def checkpoint_sources(config: HFConfig) -> tuple[str, dict[str, Any], tuple[str, ...], str]:
    """(base source, from_pretrained options, adapters to merge innermost first, tokenizer source).

    A folder may be a trained checkpoint (`mleforge sft`, `mleforge train`): a LoRA adapter that
    names its base (mleforge.policies.model_source), perhaps itself a checkpoint; its base is
    loaded, then its adapters, then `config.adapter`.
    """
    source, options = model_source(config)
    adapters: tuple[str, ...] = ()
    tokenizer_source = source
    if Path(source).is_dir() and (is_adapter_folder(Path(source)) or read_marker(source) is not None):
        resolved = resolve_model(f"hf:{source}")
        (source, options) = model_source(replace(config, model=resolved.base))
        adapters, tokenizer_source = tuple(resolved.adapters), resolved.tokenizer
    return source, options, (*adapters, *([config.adapter] if config.adapter else [])), tokenizer_source


def _not_found(config: HFConfig, exc: OSError) -> PolicyError:
    if Path(config.model).expanduser().is_dir():
        return PolicyError(f"cannot load a model from {config.model}: {exc}")
    hint = ("it could not be downloaded either (is the hub reachable?)" if config.download else
            "pass download=True to fetch it, or give a local folder")
    return PolicyError(f"model {config.model!r} is not a local folder and not in the local "
                       f"Hugging Face cache; {hint}. ({exc})")


def check_adapter(adapter: str) -> Path:
    if not Path(adapter).expanduser().is_dir():
        raise PolicyError(f"LoRA adapter folder {adapter} does not exist")
    return Path(adapter).expanduser()


def _with_adapter(model: Any, adapter: str) -> Any:
    try:
        import peft
    except ImportError:
        raise MissingExtra("peft", "train", "a LoRA adapter on the hf policy") from None
    folder = check_adapter(adapter)
    # Merged: generation runs at the base model's speed, with no adapter indirection.
    return peft.PeftModel.from_pretrained(model, str(folder)).merge_and_unload()
