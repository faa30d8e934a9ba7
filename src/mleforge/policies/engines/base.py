"""The seam between a local-model policy and whatever runs its model: the `Engine` protocol.

`HFPolicy` owns everything a policy promises (chat templates, one seed per call, greedy
answers computed once, `Completion` records, usage totals) and hands token ids to an engine,
which owns only generation:

    generation = engine.generate(prompt_ids, n=4, sampling=sampling, seed=seed)
    generation.samples[i][j].token_ids      # the j-th sample for prompt i

Two engines: `transformers` (`model.generate`, what a trainer's model runs) and `ct2`
(CTranslate2, int8 on a CPU, several times faster; extra `[fast]`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from mleforge.policies.base import SamplingConfig

ENGINES = ("transformers", "ct2")
ENGINE_CHOICES = ("auto", *ENGINES)
# ctranslate2's weight types (`ctranslate2.specs.model_spec.ACCEPTED_MODEL_TYPES`), listed
# here so that a config is checked without importing ctranslate2.
QUANTIZATIONS = ("int8", "int8_float32", "int8_float16", "int8_bfloat16", "int16",
                 "float16", "bfloat16", "float32")


@dataclass(frozen=True)
class Sample:
    """One generated sequence, as the engine made it.

    `token_ids` are the tokens that count: an end-of-sequence token the model generated is
    included (it was paid for), padding is not, and a row a stop string ended stops at the
    token that completed it. `finish_reason` is "stop" (end-of-sequence or a stop string) or
    "length". `logprobs`, when asked for and the engine gives them, holds log p(token) under
    the engine's own model at temperature 1, one per token id (see `Ct2Engine.generate`).
    """

    token_ids: tuple[int, ...]
    finish_reason: str
    latency_s: float
    logprobs: tuple[float, ...] | None = None


@dataclass(frozen=True)
class Generation:
    """What one `Engine.generate` call produced, with its bookkeeping for the usage totals.

    `requests` counts the engine's batches; `prompt_tokens` the prompt tokens handed to them
    (a prompt counts once per batch it is in, however many samples the batch draws from it);
    `latency_s` sums the batches' wall times.
    """

    samples: list[list[Sample]]
    requests: int
    prompt_tokens: int
    latency_s: float


@runtime_checkable
class Engine(Protocol):
    """Generates token ids from prompt token ids.

    `generate` returns, for each prompt in order, `n` samples drawn with `sampling`
    (temperature, top_p, max_new_tokens, stop strings; `sampling.seed` is ignored: `seed` is
    this call's own, derived by the policy, and the same seed with the same prompts gives the
    same samples). `logprobs=True` asks for per-token log-probabilities where the engine has
    them. `eos_ids` end a sequence; `context_length` is the model's context in tokens, when
    known.
    """

    name: str
    eos_ids: tuple[int, ...]

    @property
    def context_length(self) -> int | None: ...

    def generate(self, prompts: Sequence[Sequence[int]], n: int, sampling: SamplingConfig,
                 seed: int, *, logprobs: bool = False) -> Generation: ...

    def describe(self) -> dict[str, Any]: ...

    def close(self) -> None: ...
