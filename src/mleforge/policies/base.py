"""What every policy shares: the `Policy` protocol, its records, sampling settings and usage totals.

A policy turns a batch of chat prompts into completions and knows nothing of tasks:

    completions = policy.generate(prompts, n=4)   # prompts: [[{"role": ..., "content": ...}], ...]
    completions[i][j].text                        # the j-th sample for the i-th prompt
"""

from __future__ import annotations

import random
import threading
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Protocol, runtime_checkable

from mleforge.errors import MleforgeError

Message = Mapping[str, str]  # {"role": "system" | "user" | "assistant", "content": "..."}
Prompt = Sequence[Message]
ROLES = ("system", "user", "assistant")
FINISH_REASONS = ("stop", "length")  # servers may report others ("content_filter", "tool_calls")


class PolicyError(MleforgeError):
    """A policy could not produce completions: an endpoint refused, a model is missing or broken."""


@dataclass(frozen=True)
class Completion:
    """One sampled answer to one prompt.

    `prompt_tokens` is the prompt's length; `completion_tokens` the tokens generated for this
    sample (when a server reports only one total for `n` samples, each gets a share in
    proportion to its text's length). `latency_s` is how long the caller waited for the request that produced it,
    retries included.
    """

    text: str
    finish_reason: str
    prompt_tokens: int
    completion_tokens: int
    latency_s: float
    model: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Completion:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


@dataclass(frozen=True)
class SamplingConfig:
    """How to sample. `temperature=0` means greedy decoding.

    `seed` makes a run reproducible: a policy derives one seed per call from it (so two calls
    with the same prompts still differ, and a rerun repeats both). `None` opts out of
    reproducibility. `stop` strings end a completion and are not part of its text.
    """

    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 1024
    seed: int | None = 0
    stop: tuple[str, ...] = ()

    def __post_init__(self):
        if not isinstance(self.temperature, (int, float)) or not 0 <= self.temperature <= 2:
            raise ValueError(f"temperature must be in [0, 2] (0 = greedy), got {self.temperature!r}")
        if not isinstance(self.top_p, (int, float)) or not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p!r}")
        if isinstance(self.max_new_tokens, bool) or not isinstance(self.max_new_tokens, int) \
                or self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be a positive integer, got {self.max_new_tokens!r}")
        if self.seed is not None and (isinstance(self.seed, bool) or not isinstance(self.seed, int)):
            raise ValueError(f"seed must be an integer or None, got {self.seed!r}")
        stop = (self.stop,) if isinstance(self.stop, str) else tuple(self.stop)
        if any(not isinstance(s, str) or not s for s in stop):
            raise ValueError(f"stop must be non-empty strings, got {self.stop!r}")
        object.__setattr__(self, "stop", stop)  # accept a list or one string, keep a tuple

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["stop"] = list(self.stop)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SamplingConfig:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


@dataclass(frozen=True)
class Usage:
    """Totals over a policy's life: what was asked, what it cost."""

    requests: int = 0
    retries: int = 0  # failed attempts that were retried (rate limits, server errors, timeouts)
    completions: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_s: float = 0.0  # summed over requests, so concurrent requests add up

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "total_tokens": self.total_tokens}


@dataclass
class UsageMeter:
    """Thread-safe running totals; a policy owns one and returns `snapshot()` from `usage()`."""

    _usage: Usage = field(default_factory=Usage)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, *, requests: int = 0, retries: int = 0, completions: int = 0,
            prompt_tokens: int = 0, completion_tokens: int = 0, latency_s: float = 0.0) -> None:
        with self._lock:
            u = self._usage
            self._usage = Usage(u.requests + requests, u.retries + retries,
                                u.completions + completions, u.prompt_tokens + prompt_tokens,
                                u.completion_tokens + completion_tokens, u.latency_s + latency_s)

    def snapshot(self) -> Usage:
        with self._lock:
            return self._usage


def derive_seed(base: int | None, *path: int) -> int | None:
    """A seed for one call (or one request of a call), derived from a run's base seed.

    Reruns repeat (same base, same path, same seed) while calls differ (a different path).
    A string seed makes `random.Random` hash deterministically across processes, unlike
    `hash()` of a tuple. `None` stays `None`: the run opted out of reproducibility.
    """
    if base is None:
        return None
    return random.Random(":".join(map(str, (base, *path)))).randrange(2**31)


class CallCounter:
    """Numbers a policy's calls, so each derives its own seed; thread-safe."""

    def __init__(self):
        self._next = 0
        self._lock = threading.Lock()

    def __call__(self) -> int:
        with self._lock:
            value, self._next = self._next, self._next + 1
            return value


@runtime_checkable
class Policy(Protocol):
    """Turns chat prompts into completions.

    `generate` returns, for each prompt in order, `n` completions. `sampling` overrides the
    policy's default settings for this call. `states`, when given, holds the structured state
    each prompt was rendered from (same order): LLM policies ignore it; the offline template
    expert reads it. `usage()` gives totals since construction; `close()` frees resources
    (threads, memory) and is safe to call twice.
    """

    @property
    def model(self) -> str: ...

    def generate(self, prompts: Sequence[Prompt], n: int = 1,
                 sampling: SamplingConfig | None = None, *,
                 states: Sequence[Any] | None = None) -> list[list[Completion]]: ...

    def usage(self) -> Usage: ...

    def close(self) -> None: ...


def check_request(prompts: Sequence[Prompt], n: int) -> list[list[dict[str, str]]]:
    """Validate a `generate` call's arguments; return the prompts as plain lists of dicts."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a positive integer, got {n!r}")
    if isinstance(prompts, (str, Mapping)) or not isinstance(prompts, Sequence):
        raise TypeError("prompts must be a list of prompts, each a list of chat messages")
    out = []
    for i, prompt in enumerate(prompts):
        if isinstance(prompt, (str, Mapping)) or not isinstance(prompt, Sequence) or not prompt:
            raise TypeError(f"prompt {i} must be a non-empty list of {{'role', 'content'}} messages")
        messages = []
        for message in prompt:
            role, content = message.get("role"), message.get("content")
            if role not in ROLES or not isinstance(content, str):
                raise ValueError(
                    f"prompt {i}: each message needs a role in {ROLES} and a string content, "
                    f"got role={role!r}, content of type {type(content).__name__}"
                )
            messages.append({"role": role, "content": content})
        out.append(messages)
    return out


def cut_at_stop(text: str, stop: Sequence[str]) -> tuple[str, bool]:
    """The text before the first stop string, and whether one was found."""
    cut = min((i for i in (text.find(s) for s in stop) if i >= 0), default=-1)
    return (text[:cut], True) if cut >= 0 else (text, False)


def split_evenly(total: int, weights: Sequence[int]) -> list[int]:
    """Split an integer total in proportion to weights (largest remainders), summing exactly."""
    if not weights:
        return []
    weight_sum = sum(weights)
    if weight_sum <= 0:
        weights, weight_sum = [1] * len(weights), len(weights)
    exact = [total * w / weight_sum for w in weights]
    shares = [int(x) for x in exact]
    by_remainder = sorted(range(len(exact)), key=lambda i: exact[i] - shares[i], reverse=True)
    for i in by_remainder[: total - sum(shares)]:
        shares[i] += 1
    return shares
