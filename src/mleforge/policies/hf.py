"""A policy over a local transformers causal LM (a folder or a cached hub id, LoRA optional).

A folder may also be a trained checkpoint (`mleforge sft`, `mleforge train`): a LoRA adapter
that names its base (mleforge.policies.checkpoint); the base is loaded and the adapters merged.

torch, transformers and peft are imported when a model loads, never at import time.
"""

from __future__ import annotations

import gc
import random
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from mleforge.errors import MissingExtra
from mleforge.policies.base import (
    CallCounter,
    Completion,
    PolicyError,
    Prompt,
    SamplingConfig,
    Usage,
    UsageMeter,
    check_request,
    cut_at_stop,
    derive_seed,
)
from mleforge.policies.checkpoint import is_adapter_folder, read_marker, resolve_model

DEVICES = ("auto", "cpu", "cuda", "mps")
DTYPES = ("auto", "float32", "bfloat16", "float16")


@dataclass(frozen=True)
class HFConfig:
    """Which model and how to run it.

    `model` is a local folder or a hub id; a hub id must already be in the local Hugging Face
    cache unless `download=True` (many machines that train have no hub access). `device` "auto"
    takes a GPU when there is one; `dtype` "auto" is bfloat16 on a GPU that supports it and
    float32 on a CPU (without AVX-512 BF16, CPU matmuls in bfloat16 run several times slower).
    `max_batch_size` bounds the sequences (prompts x samples) generated together, and so memory.
    `num_threads` sets torch's CPU threads while this policy generates (restored after); on a
    CPU shared with other work, 1 thread can be several times faster than OpenMP's default of
    one per core, whose threads wait on each other whenever one is preempted.
    """

    model: str
    adapter: str | None = None
    device: str = "auto"
    dtype: str = "auto"
    max_batch_size: int = 16
    num_threads: int | None = None
    download: bool = False
    trust_remote_code: bool = False
    name: str = ""  # reported as Completion.model; defaults to `model`
    sampling: SamplingConfig = field(default_factory=SamplingConfig)

    def __post_init__(self):
        if not isinstance(self.model, str) or not self.model:
            raise ValueError("model must be a local folder or a hub id")
        if self.device.split(":")[0] not in DEVICES:
            raise ValueError(f"device must be one of {DEVICES} (or cuda:<index>), got {self.device!r}")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {DTYPES}, got {self.dtype!r}")
        if isinstance(self.max_batch_size, bool) or not isinstance(self.max_batch_size, int) \
                or self.max_batch_size < 1:
            raise ValueError(f"max_batch_size must be a positive integer, got {self.max_batch_size!r}")
        if self.num_threads is not None and (not isinstance(self.num_threads, int)
                                             or self.num_threads < 1):
            raise ValueError(f"num_threads must be a positive integer or None, got {self.num_threads!r}")
        if isinstance(self.sampling, Mapping):
            object.__setattr__(self, "sampling", SamplingConfig.from_dict(self.sampling))

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["sampling"] = self.sampling.to_dict()
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> HFConfig:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


def import_torch_transformers() -> tuple[Any, Any]:
    """torch and transformers, or an error naming the extra that installs them."""
    try:
        import torch
    except ImportError:
        raise MissingExtra("torch", "train", "the hf policy") from None
    try:
        import transformers
    except ImportError:
        raise MissingExtra("transformers", "train", "the hf policy") from None
    return torch, transformers


class HFPolicy:
    """Samples from a local causal LM with its tokenizer's chat template; see `HFConfig`."""

    def __init__(self, config: HFConfig, *, model: Any = None, tokenizer: Any = None):
        """Load `config.model`, or wrap an already loaded `model` and `tokenizer` (a trainer's,
        which stays in whatever mode the trainer keeps it: eval() it for generation)."""
        self.config = config
        self._torch, transformers = import_torch_transformers()
        self._meter = UsageMeter()
        self._calls = CallCounter()
        self._lock = threading.Lock()  # one generate at a time: the model and torch's RNG are shared
        if model is None:
            model, tokenizer = _load(config, self._torch, transformers)
        elif tokenizer is None:
            raise ValueError("pass the tokenizer along with an already loaded model")
        self._model, self._tokenizer = model, tokenizer
        self._device = str(next(model.parameters()).device)
        if getattr(tokenizer, "chat_template", None) is None:
            raise PolicyError(f"the tokenizer of {config.model} has no chat template; "
                              f"use an instruct (chat) model")
        self._eos_ids = _eos_ids(model, tokenizer)
        self._pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None \
            else self._eos_ids[0]

    @property
    def model(self) -> str:
        return self.config.name or self.config.model

    @property
    def device(self) -> str:
        return self._device

    @property
    def hf_model(self) -> Any:
        return self._model

    @property
    def tokenizer(self) -> Any:
        return self._tokenizer

    def __repr__(self) -> str:
        return f"HFPolicy(model={self.model!r}, device={self.device!r})"

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "hf", **self.config.to_dict()}

    def usage(self) -> Usage:
        return self._meter.snapshot()

    def close(self) -> None:
        with self._lock:
            cuda = self._model is not None and self.device.startswith("cuda")
            self._model = None
            gc.collect()
            if cuda:
                self._torch.cuda.empty_cache()

    def generate(self, prompts: Sequence[Prompt], n: int = 1,
                 sampling: SamplingConfig | None = None, *,
                 states: Sequence[Any] | None = None) -> list[list[Completion]]:
        messages = check_request(prompts, n)
        sampling = sampling or self.config.sampling
        with self._lock:
            if self._model is None:
                raise PolicyError(f"{self!r} was closed; make a new policy")
            call_seed = derive_seed(sampling.seed, self._calls())
            if call_seed is None:
                call_seed = random.SystemRandom().randrange(2**31)
            texts = [self._tokenizer.apply_chat_template(m, add_generation_prompt=True,
                                                         tokenize=False) for m in messages]
            results: list[list[Completion]] = [[] for _ in messages]
            # Greedy decoding gives one answer however often it is asked: compute it once.
            samples = 1 if sampling.greedy else n
            for step, (indices, count) in enumerate(
                    plan_batches(len(texts), samples, self.config.max_batch_size)):
                batch = self._generate_batch([texts[i] for i in indices], count, sampling,
                                             derive_seed(call_seed, step))
                for i, completions in zip(indices, batch):
                    results[i].extend(completions)
            if sampling.greedy:
                results = [got * n for got in results]
            return results

    def _generate_batch(self, texts: list[str], count: int, sampling: SamplingConfig,
                        seed: int) -> list[list[Completion]]:
        """`count` samples for each text, generated together: one forward pass per token."""
        torch = self._torch
        encoded = self._tokenizer(texts, return_tensors="pt", padding=True, padding_side="left",
                                  add_special_tokens=False).to(self._model.device)
        self._check_context(encoded["input_ids"].shape[1], sampling.max_new_tokens)
        options: dict[str, Any] = {"max_new_tokens": sampling.max_new_tokens,
                                   "num_return_sequences": count, "pad_token_id": self._pad_id,
                                   "eos_token_id": self._eos_ids, "do_sample": not sampling.greedy}
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
        with torch.random.fork_rng(devices=cuda), torch.inference_mode():
            torch.manual_seed(seed)
            if self.config.num_threads:
                torch.set_num_threads(self.config.num_threads)
            try:
                output = self._model.generate(**encoded, **options)
            finally:
                torch.set_num_threads(threads)
        latency = time.perf_counter() - started

        prompt_lengths = encoded["attention_mask"].sum(dim=1).tolist()
        new_tokens = output[:, encoded["input_ids"].shape[1]:].tolist()
        batch: list[list[Completion]] = [[] for _ in texts]
        for row, tokens in enumerate(new_tokens):
            prompt = row // count  # generate orders rows prompt-major: p0s0, p0s1, ..., p1s0
            batch[prompt].append(self._completion(tokens, sampling, prompt_lengths[prompt], latency))
        completion_tokens = sum(c.completion_tokens for got in batch for c in got)
        self._meter.add(requests=1, completions=len(new_tokens), prompt_tokens=sum(prompt_lengths),
                        completion_tokens=completion_tokens, latency_s=latency)
        return batch

    def _check_context(self, prompt_tokens: int, max_new_tokens: int) -> None:
        """Refuse up front what the model cannot attend to, rather than generate garbage."""
        context = getattr(self._model.config, "max_position_embeddings", None)
        if context and prompt_tokens + max_new_tokens > context:
            raise PolicyError(f"a prompt of {prompt_tokens} tokens plus max_new_tokens="
                              f"{max_new_tokens} exceeds {self.model}'s context of {context} "
                              f"tokens; shorten the prompt or lower max_new_tokens")

    def _completion(self, tokens: list[int], sampling: SamplingConfig, prompt_tokens: int,
                    latency: float) -> Completion:
        """Decode one generated row; find why it ended and how many tokens it really used."""
        ends = [i for i, t in enumerate(tokens) if t in self._eos_ids or t == self._pad_id]
        end = ends[0] if ends else len(tokens)
        text, stopped = cut_at_stop(self._tokenizer.decode(tokens[:end], skip_special_tokens=True),
                                    sampling.stop)
        if stopped or end < len(tokens):
            # An end-of-sequence token was generated (and counts) unless a stop string ended the
            # row, after which generate only pads.
            used = end + (0 if stopped or tokens[end] not in self._eos_ids else 1)
            return Completion(text, "stop", prompt_tokens, min(used, len(tokens)), latency,
                              self.model)
        return Completion(text, "length", prompt_tokens, len(tokens), latency, self.model)


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


def _eos_ids(model: Any, tokenizer: Any) -> list[int]:
    configured = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    ids = configured if isinstance(configured, list) else [configured]
    ids = [i for i in [*ids, tokenizer.eos_token_id] if i is not None]
    if not ids:
        raise PolicyError("the model declares no end-of-sequence token; cannot tell where an "
                          "answer ends")
    return list(dict.fromkeys(ids))


def _device(torch: Any, requested: str) -> str:
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


def _load(config: HFConfig, torch: Any, transformers: Any) -> tuple[Any, Any]:
    device = _device(torch, config.device)
    dtype = _dtype(torch, config.dtype, device)
    source, options = _source(config)
    adapters: tuple[str, ...] = ()
    tokenizer_source = source
    if Path(source).is_dir() and (is_adapter_folder(Path(source)) or read_marker(source) is not None):
        # A trained checkpoint: its base (perhaps itself a checkpoint), then its adapters.
        resolved = resolve_model(f"hf:{source}")
        base = replace(config, model=resolved.base)
        (source, options), adapters, tokenizer_source = _source(base), resolved.adapters, resolved.tokenizer
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(tokenizer_source, **options)
        model = transformers.AutoModelForCausalLM.from_pretrained(source, dtype=dtype, **options)
    except OSError as exc:
        raise _not_found(config, exc) from None
    for adapter in (*adapters, *([config.adapter] if config.adapter else [])):
        model = _with_adapter(model, adapter)
    model.to(device)
    model.eval()
    return model, tokenizer


def _source(config: HFConfig) -> tuple[str, dict[str, Any]]:
    options = {"trust_remote_code": config.trust_remote_code}
    path = Path(config.model).expanduser()
    if path.is_dir():
        return str(path), options
    if path.exists() or config.model.startswith((".", "/", "~")):
        raise PolicyError(f"{config.model} is not a model folder (a directory with config.json "
                          f"and weights)")
    return config.model, {**options, "local_files_only": not config.download}


def _not_found(config: HFConfig, exc: OSError) -> PolicyError:
    if Path(config.model).expanduser().is_dir():
        return PolicyError(f"cannot load a model from {config.model}: {exc}")
    hint = ("it could not be downloaded either (is the hub reachable?)" if config.download else
            "pass download=True to fetch it, or give a local folder")
    return PolicyError(f"model {config.model!r} is not a local folder and not in the local "
                       f"Hugging Face cache; {hint}. ({exc})")


def _with_adapter(model: Any, adapter: str) -> Any:
    try:
        import peft
    except ImportError:
        raise MissingExtra("peft", "train", "a LoRA adapter on the hf policy") from None
    if not Path(adapter).expanduser().is_dir():
        raise PolicyError(f"LoRA adapter folder {adapter} does not exist")
    # Merged: generation runs at the base model's speed, with no adapter indirection.
    return peft.PeftModel.from_pretrained(model, str(Path(adapter).expanduser())).merge_and_unload()
