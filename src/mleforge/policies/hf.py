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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mleforge.errors import ConfigError
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
from mleforge.policies.bundled import prepare_bundled
from mleforge.policies.engines.base import Engine, Sample
from mleforge.policies.extras import import_ctranslate2, import_torch_transformers
from mleforge.policies.hf_config import HFConfig

log = logging.getLogger(__name__)


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


def bundled_policy(name: str, *, models_dir: str | Path | None = None, **options: Any) -> HFPolicy:
    """An HFPolicy on a bundled model; `options` go to `HFConfig` (device, dtype, engine,
    quantization, sampling...)."""
    known = set(HFConfig.__dataclass_fields__) - {"model"}
    unknown = sorted(set(options) - known)
    if unknown:
        raise ConfigError(f"bundled policy: unknown option(s) {', '.join(unknown)}; "
                          f"known: models_dir, {', '.join(sorted(known))}")
    if options.get("engine") == "ct2":
        import_ctranslate2()  # name the missing extra before minutes of assembly
    root = Path(models_dir) if models_dir else None
    folder = prepare_bundled(name, root)
    if root is not None and options.get("ct2_cache") is None:
        options["ct2_cache"] = str(root / "ct2")  # conversions beside the model they come from
    return HFPolicy(HFConfig(model=str(folder), name=options.pop("name", name), **options))


# --- which engine ---


def choose_engine(config: HFConfig, *, in_memory: bool = False) -> EngineChoice:
    """The engine `config` asks for; for "auto", ct2 where it is installed, runs on the device
    and converts the model's architecture, else transformers, with the reason."""
    if config.engine == "transformers":
        return EngineChoice("transformers", "engine='transformers' was asked for")
    if config.engine == "ct2":
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
