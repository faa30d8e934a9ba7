"""A policy over a local transformers causal LM (a folder or a cached hub id, LoRA optional).

The policy turns chat prompts into token ids and samples into `Completion`s; an engine
(`policies/engines/`) generates: `transformers` (`model.generate`) or `ct2` (the model converted
to CTranslate2 once and cached, int8 on a CPU, several times faster; extra `[fast]`).
`engine="auto"` takes ct2 where it is installed and converts the architecture, and says why
it took what it took (`to_dict()["engine_used"]` and a log line).

torch, transformers, peft and ctranslate2 are imported when a model loads, never at import time.
"""

from __future__ import annotations

import gc
import logging
import random
import threading
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any

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
from mleforge.policies.engines.base import ENGINE_CHOICES, Engine, Sample
from mleforge.policies.engines.ct2_convert import QUANTIZATIONS
from mleforge.policies.engines.transformers import import_torch_transformers

__all__ = ["DEVICES", "DTYPES", "HFConfig", "HFPolicy", "import_torch_transformers"]

log = logging.getLogger(__name__)

DEVICES = ("auto", "cpu", "cuda", "mps")
DTYPES = ("auto", "float32", "bfloat16", "float16")


@dataclass(frozen=True)
class HFConfig:
    """Which model and how to run it.

    `model` is a local folder or a hub id; a hub id must already be in the local Hugging Face
    cache unless `download=True` (many machines that train have no hub access). `device` "auto"
    takes a GPU when there is one. `engine` picks what generates (see the module docstring).
    For the transformers engine, `dtype` "auto" is bfloat16 on a GPU that supports it and
    float32 on a CPU (without AVX-512 BF16, CPU matmuls in bfloat16 run several times slower).
    For ct2, `quantization` is the converted weights' type (None: int8 on a CPU, float16 on a
    GPU) and `ct2_cache` the folder conversions are cached in (None: `<models root>/ct2`).
    `max_batch_size` bounds the sequences (prompts x samples) generated together, and so memory.
    `num_threads` is the CPU threads the engine generates with (torch's, restored after; or
    ctranslate2's); on a CPU shared with other work, 1 thread can be several times faster than
    one per core, whose threads wait on each other whenever one is preempted.
    """

    model: str
    adapter: str | None = None
    device: str = "auto"
    dtype: str = "auto"
    engine: str = "transformers"
    quantization: str | None = None
    ct2_cache: str | None = None
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
        if self.engine not in ENGINE_CHOICES:
            raise ValueError(f"engine must be one of {ENGINE_CHOICES}, got {self.engine!r}")
        if self.quantization is not None and self.quantization not in QUANTIZATIONS:
            raise ValueError(f"quantization must be one of {QUANTIZATIONS} (or None for the "
                             f"device's default), got {self.quantization!r}")
        if self.quantization is not None and self.engine == "transformers":
            raise ValueError("quantization applies to the ct2 engine; the transformers engine "
                             "takes dtype (or pass engine='ct2' or 'auto')")
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


@dataclass(frozen=True)
class EngineChoice:
    """Which engine a policy generates with, and why."""

    name: str
    reason: str


class HFPolicy:
    """Samples from a local causal LM with its tokenizer's chat template; see `HFConfig`."""

    def __init__(self, config: HFConfig, *, model: Any = None, tokenizer: Any = None):
        """Load `config.model`, or wrap an already loaded `model` and `tokenizer` (a trainer's,
        which stays in whatever mode the trainer keeps it: eval() it for generation; with
        engine="ct2" it is converted, and left untouched)."""
        if model is not None and tokenizer is None:
            raise ValueError("pass the tokenizer along with an already loaded model")
        self.config = config
        self._meter = UsageMeter()
        self._calls = CallCounter()
        self._lock = threading.Lock()  # one generate at a time: the engine and RNG are shared
        self._closed = False
        self.choice = choose_engine(config, in_memory=model is not None)
        if self.choice.name == "ct2":
            self._engine, self._tokenizer = _ct2_engine(config, model, tokenizer)
        else:
            self._engine, self._tokenizer = _transformers_engine(config, model, tokenizer)
        log.info("%s generates with the %s engine (%s)", self.model, self.choice.name,
                 self.choice.reason)

    @property
    def model(self) -> str:
        return self.config.name or self.config.model

    @property
    def engine(self) -> Engine:
        return self._engine

    @property
    def device(self) -> str:
        return self._engine.describe()["device"]

    @property
    def hf_model(self) -> Any:
        """The transformers model (transformers engine only)."""
        if self.choice.name != "transformers":
            raise PolicyError(f"{self!r} generates with the {self.choice.name} engine and holds "
                              f"no transformers model; use engine='transformers'")
        return self._engine.model

    @property
    def tokenizer(self) -> Any:
        return self._tokenizer

    def __repr__(self) -> str:
        return f"HFPolicy(model={self.model!r}, engine={self.choice.name!r})"

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "hf", **self.config.to_dict(),
                "engine_used": {**self._engine.describe(), "reason": self.choice.reason}}

    def usage(self) -> Usage:
        return self._meter.snapshot()

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                self._engine.close()
                gc.collect()

    def generate(self, prompts: Sequence[Prompt], n: int = 1,
                 sampling: SamplingConfig | None = None, *,
                 states: Sequence[Any] | None = None) -> list[list[Completion]]:
        messages = check_request(prompts, n)
        sampling = sampling or self.config.sampling
        with self._lock:
            if self._closed:
                raise PolicyError(f"{self!r} was closed; make a new policy")
            call_seed = derive_seed(sampling.seed, self._calls())
            if call_seed is None:
                call_seed = random.SystemRandom().randrange(2**31)
            ids = [self.prompt_ids(m) for m in messages]
            for prompt in ids:
                self._check_context(len(prompt), sampling.max_new_tokens)
            # Greedy decoding gives one answer however often it is asked: compute it once.
            draws = 1 if sampling.greedy else n
            generation = self._engine.generate(ids, draws, sampling, call_seed)
            results = [[self._completion(s, sampling, len(ids[i])) for s in got]
                       for i, got in enumerate(generation.samples)]
            self._meter.add(requests=generation.requests,
                            completions=sum(len(got) for got in results),
                            prompt_tokens=generation.prompt_tokens,
                            completion_tokens=sum(c.completion_tokens for got in results
                                                  for c in got),
                            latency_s=generation.latency_s)
            if draws < n:
                results = [got * n for got in results]
            return results

    def prompt_ids(self, messages: Sequence[Mapping[str, str]]) -> list[int]:
        """A chat's token ids, as the model sees it: its chat template, a generation prompt."""
        text = self._tokenizer.apply_chat_template(list(messages), add_generation_prompt=True,
                                                   tokenize=False)
        return self._tokenizer(text, add_special_tokens=False)["input_ids"]

    def _check_context(self, prompt_tokens: int, max_new_tokens: int) -> None:
        """Refuse up front what the model cannot attend to, rather than generate garbage."""
        context = self._engine.context_length
        if context and prompt_tokens + max_new_tokens > context:
            raise PolicyError(f"a prompt of {prompt_tokens} tokens plus max_new_tokens="
                              f"{max_new_tokens} exceeds {self.model}'s context of {context} "
                              f"tokens; shorten the prompt or lower max_new_tokens")

    def _completion(self, sample: Sample, sampling: SamplingConfig,
                    prompt_tokens: int) -> Completion:
        """A sample's text (up to a stop string; an end-of-sequence token it generated counts
        but is not text)."""
        tokens = list(sample.token_ids)
        if sample.finish_reason == "stop" and tokens and tokens[-1] in self._engine.eos_ids:
            tokens = tokens[:-1]
        text, stopped = cut_at_stop(self._tokenizer.decode(tokens, skip_special_tokens=True),
                                    sampling.stop)
        return Completion(text, "stop" if stopped else sample.finish_reason, prompt_tokens,
                          len(sample.token_ids), sample.latency_s, self.model)


# --- which engine ---


def choose_engine(config: HFConfig, *, in_memory: bool = False) -> EngineChoice:
    """The engine `config` asks for; for "auto", ct2 where it is installed, runs on the device
    and converts the model's architecture, else transformers, with the reason."""
    if config.engine == "transformers":
        return EngineChoice("transformers", "engine='transformers' was asked for")
    if config.engine == "ct2":
        from mleforge.policies.engines.ct2_convert import import_ctranslate2

        import_ctranslate2()  # fails here, naming the extra, rather than after loading a model
        return EngineChoice("ct2", "engine='ct2' was asked for")
    if in_memory:
        return EngineChoice("transformers", "the model is already loaded in memory")
    try:
        import ctranslate2
    except ImportError:
        return EngineChoice("transformers", "ctranslate2 is not installed "
                                            "(pip install 'mleforge[fast]')")
    if config.trust_remote_code:
        return EngineChoice("transformers", "a model with its own code (trust_remote_code)")
    device = _device(config)
    if device.startswith("mps"):
        return EngineChoice("transformers", "ctranslate2 does not run on mps")
    if device.startswith("cuda") and ctranslate2.get_cuda_device_count() == 0:
        return EngineChoice("transformers", "this ctranslate2 build sees no CUDA device")
    from mleforge.policies.engines.ct2_convert import architecture_converts

    model_config = _model_config(config)
    kind = type(model_config).__name__
    if not architecture_converts(model_config):
        return EngineChoice("transformers", f"ctranslate2 {ctranslate2.__version__} cannot "
                                            f"convert {kind} models")
    return EngineChoice("ct2", f"ctranslate2 {ctranslate2.__version__} is installed and "
                               f"converts {kind} models")


def _device(config: HFConfig) -> str:
    from mleforge.policies.engines.transformers import resolve_device

    torch, _ = import_torch_transformers()
    return resolve_device(torch, config.device)


def _model_config(config: HFConfig) -> Any:
    from mleforge.policies.engines.transformers import _not_found, checkpoint_sources

    _, transformers = import_torch_transformers()
    # A trained checkpoint (an adapter naming its base) has the base's architecture.
    source, options, _, _ = checkpoint_sources(config)
    try:
        return transformers.AutoConfig.from_pretrained(source, **options)
    except OSError as exc:
        raise _not_found(config, exc) from None


def _check_chat_template(config: HFConfig, tokenizer: Any) -> None:
    if getattr(tokenizer, "chat_template", None) is None:
        raise PolicyError(f"the tokenizer of {config.model} has no chat template; "
                          f"use an instruct (chat) model")


def _transformers_engine(config: HFConfig, model: Any, tokenizer: Any) -> tuple[Engine, Any]:
    from mleforge.policies.engines.transformers import TransformersEngine, load_model

    if model is None:
        model, tokenizer = load_model(config)
    _check_chat_template(config, tokenizer)
    return TransformersEngine(model, tokenizer, max_batch_size=config.max_batch_size,
                              num_threads=config.num_threads), tokenizer


def _ct2_engine(config: HFConfig, model: Any, tokenizer: Any) -> tuple[Engine, Any]:
    """A ct2 engine on the in-memory `model`, or on the cached conversion of config.model."""
    from mleforge.policies.engines.ct2 import Ct2Engine
    from mleforge.policies.engines.ct2_convert import (
        cached_conversion,
        default_quantization,
        rebuild_conversion,
    )
    from mleforge.policies.engines.transformers import (
        eos_token_ids,
        load_tokenizer,
        model_source,
    )

    device = _device(config)
    if device.startswith("cuda"):
        import ctranslate2

        if ctranslate2.get_cuda_device_count() == 0:  # not a broken conversion: say so now
            raise PolicyError("this ctranslate2 build sees no CUDA device; pass device='cpu' "
                              "or engine='transformers'")
    options = {"device": device, "num_threads": config.num_threads,
               "max_batch_size": config.max_batch_size}
    quantization = config.quantization or default_quantization(device.split(":")[0])
    if model is not None:
        _check_chat_template(config, tokenizer)
        return Ct2Engine.from_model(model, tokenizer, quantization=quantization,
                                    **options), tokenizer
    tokenizer = load_tokenizer(config)
    _check_chat_template(config, tokenizer)  # before a conversion that may take minutes
    _, transformers = import_torch_transformers()
    source, source_options = model_source(config)
    try:
        generation_config = transformers.GenerationConfig.from_pretrained(source, **source_options)
    except OSError:  # a model without generation_config.json: the tokenizer's EOS alone
        generation_config = None
    options.update(context_length=getattr(_model_config(config), "max_position_embeddings", None),
                   quantization=quantization)
    eos = eos_token_ids(generation_config, tokenizer)
    found = cached_conversion(config, quantization)
    try:
        engine = Ct2Engine(found.folder, tokenizer, eos, **options)
    except PolicyError as exc:  # files that pass the checks but do not load: convert again
        found = rebuild_conversion(config, found, str(exc))
        engine = Ct2Engine(found.folder, tokenizer, eos, **options)
    engine.conversion = found
    return engine, tokenizer
