"""A policy over any OpenAI-compatible chat-completions endpoint (vLLM, SGLang, llama.cpp server,
hosted APIs), written on the standard library so the core install needs no SDK.

The API key is read from the environment variable named by `api_key_env` at each request and
is kept nowhere else: not in the config, the policy's attributes, its repr, logs or errors.
"""

from __future__ import annotations

import email.utils
import http.client
import ipaddress
import json
import logging
import os
import random
import re
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass, field, fields, replace
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
    split_evenly,
)

log = logging.getLogger(__name__)

BASE_URL_ENV = "OPENAI_BASE_URL"
DEFAULT_BASE_URL = "https://api.openai.com/v1"
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_RETRY_STATUSES = frozenset({408, 409, 429})  # plus every 5xx
_BEARER = re.compile(r"Bearer\s+\S+", re.IGNORECASE)


class EndpointError(PolicyError):
    """The endpoint refused a request or could not be reached; `status` is None without an answer."""

    def __init__(self, message: str, *, status: int | None = None, url: str = ""):
        self.status = status
        self.url = url
        super().__init__(message)


@dataclass(frozen=True)
class OpenAIConfig:
    """Where the endpoint is and how to talk to it.

    `base_url` empty means `$OPENAI_BASE_URL`, else OpenAI's. `api_key_env` is the NAME of the
    variable holding the key; when that variable is unset no Authorization header is sent (local
    servers need none). `timeout_s` bounds the connection and the wait for each read of the
    answer. Failed attempts (429, 5xx, timeouts, dropped connections) are retried `max_retries`
    times with exponential backoff and jitter (seeded by `seed`), or as long as `Retry-After`
    says, capped at `backoff_max_s`. At most `max_concurrency` requests are in flight.
    """

    model: str
    base_url: str = ""
    api_key_env: str = "OPENAI_API_KEY"
    timeout_s: float = 120.0
    max_retries: int = 5
    backoff_s: float = 1.0
    backoff_max_s: float = 60.0
    max_concurrency: int = 8
    use_n: bool = True  # ask for n samples in one request; falls back on its own when ignored
    max_tokens_field: str = "max_tokens"  # OpenAI's reasoning models want "max_completion_tokens"
    seed: int = 0
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    extra_body: Mapping[str, Any] = field(default_factory=dict)  # e.g. {"top_k": 20} for vLLM

    def __post_init__(self):
        if not isinstance(self.model, str) or not self.model:
            raise ValueError("model must name the served model, e.g. 'Qwen/Qwen2.5-Coder-7B-Instruct'")
        if self.base_url and not self.base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must start with http:// or https://, got {self.base_url!r}")
        if not isinstance(self.api_key_env, str) or not _ENV_NAME.match(self.api_key_env):
            # Never echo the value: a common mistake is passing the key itself here.
            raise ValueError("api_key_env must be the NAME of an environment variable holding the "
                             "key (like OPENAI_API_KEY), not the key itself")
        for name in ("timeout_s", "backoff_s", "backoff_max_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)!r}")
        if not isinstance(self.max_retries, int) or self.max_retries < 0:
            raise ValueError(f"max_retries must be a non-negative integer, got {self.max_retries!r}")
        if not isinstance(self.max_concurrency, int) or self.max_concurrency < 1:
            raise ValueError(f"max_concurrency must be >= 1, got {self.max_concurrency!r}")
        if isinstance(self.sampling, Mapping):
            object.__setattr__(self, "sampling", SamplingConfig.from_dict(self.sampling))
        object.__setattr__(self, "extra_body", dict(self.extra_body))

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["sampling"] = self.sampling.to_dict()
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> OpenAIConfig:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


def is_local_endpoint(base_url: str) -> bool:
    """Whether `base_url` names a server of this machine or its network, which usually needs
    no key: localhost, a loopback, private or link-local address, or a host name without a
    dot (a container or cluster service such as `http://vllm:8000/v1`)."""
    host = (urllib.parse.urlsplit(base_url).hostname or "").rstrip(".").lower()
    if not host:
        return False
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return "." not in host
    return address.is_loopback or address.is_private or address.is_link_local


class OpenAIPolicy:
    """Chat completions from an OpenAI-compatible server; see `OpenAIConfig`.

    A remote endpoint (`is_local_endpoint` false) with no key in `$api_key_env` is refused at
    once, with what to set, instead of failing on its first request after retries."""

    def __init__(self, config: OpenAIConfig):
        base_url = config.base_url or os.environ.get(BASE_URL_ENV) or DEFAULT_BASE_URL
        if not os.environ.get(config.api_key_env) and not is_local_endpoint(base_url):
            raise PolicyError(
                f"no API key for {base_url}: ${config.api_key_env} is not set. Export it "
                f"(export {config.api_key_env}=...), name another variable with api_key_env, or "
                f"serve the model locally (e.g. vLLM at http://localhost:8000/v1, which needs no "
                f"key); if this server takes no key, set {config.api_key_env} to any value"
            )
        self.config = replace(config, base_url=base_url.rstrip("/"))
        self.url = f"{self.config.base_url}/chat/completions"
        self._meter = UsageMeter()
        self._calls = CallCounter()
        self._slots = threading.BoundedSemaphore(self.config.max_concurrency)
        self._jitter = random.Random(self.config.seed)
        self._jitter_lock = threading.Lock()
        self._n_honored = self.config.use_n
        self._pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()

    @property
    def model(self) -> str:
        return self.config.model

    def __repr__(self) -> str:
        return (f"OpenAIPolicy(model={self.config.model!r}, base_url={self.config.base_url!r}, "
                f"api_key_env={self.config.api_key_env!r})")

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "openai", **self.config.to_dict()}

    def usage(self) -> Usage:
        return self._meter.snapshot()

    def close(self) -> None:
        with self._pool_lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> OpenAIPolicy:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- generation -------------------------------------------------------------------------

    def generate(self, prompts: Sequence[Prompt], n: int = 1,
                 sampling: SamplingConfig | None = None, *,
                 states: Sequence[Any] | None = None) -> list[list[Completion]]:
        messages = check_request(prompts, n)
        sampling = sampling or self.config.sampling
        call = self._calls()
        results: list[list[Completion]] = [[] for _ in messages]

        # One request per prompt asking for n samples; servers that ignore `n` (llama.cpp) get
        # the missing samples as separate requests, and every later call goes straight to that.
        if self._n_honored and n > 1:
            jobs = [(i, 0, n) for i in range(len(messages))]
        else:
            jobs = [(i, j, 1) for i in range(len(messages)) for j in range(n)]
        self._run(jobs, messages, sampling, call, results)
        missing = [(i, n - len(got)) for i, got in enumerate(results) if len(got) < n]
        if missing:
            if self._n_honored and n > 1:
                log.info("%s returned fewer choices than n=%d; asking one sample per request "
                         "from now on", self.url, n)
                self._n_honored = False
            jobs = [(i, n + k, 1) for i, count in missing for k in range(count)]
            self._run(jobs, messages, sampling, call, results)
        for i, got in enumerate(results):
            if len(got) < n:
                raise EndpointError(f"{self.url} returned {len(got)} of {n} completions for "
                                    f"prompt {i}, even one request at a time", url=self.url)
            del got[n:]
        return results

    def _run(self, jobs, messages, sampling, call, results) -> None:
        """Send requests concurrently; results land in their prompt's list, in job order."""
        pool = self._get_pool()
        futures: list[tuple[int, Future]] = []
        for prompt_index, request_index, count in jobs:
            seed = derive_seed(sampling.seed, call, prompt_index, request_index)
            body = self._body(messages[prompt_index], count, sampling, seed)
            futures.append((prompt_index, pool.submit(self._request, body, sampling)))
        done, _ = wait([f for _, f in futures], return_when=FIRST_EXCEPTION)
        failed = next((f for f in done if f.exception() is not None), None)
        if failed is not None:
            for _, f in futures:
                f.cancel()
            raise failed.exception()
        for prompt_index, f in futures:
            results[prompt_index].extend(f.result())

    def _get_pool(self) -> ThreadPoolExecutor:
        with self._pool_lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.config.max_concurrency,
                                                thread_name_prefix="mleforge-openai")
            return self._pool

    def _body(self, messages, count: int, sampling: SamplingConfig, seed: int | None) -> bytes:
        body: dict[str, Any] = {
            "model": self.config.model,
            "messages": messages,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            self.config.max_tokens_field: sampling.max_new_tokens,
            "stream": False,
        }
        if count > 1:
            body["n"] = count
        if seed is not None:
            body["seed"] = seed
        if sampling.stop:
            body["stop"] = list(sampling.stop)
        body.update(self.config.extra_body)
        return json.dumps(body).encode()

    def _request(self, body: bytes, sampling: SamplingConfig) -> list[Completion]:
        """One chat-completions request, retried; its choices as completions."""
        started = time.perf_counter()
        data = self._post_with_retries(body)
        latency = time.perf_counter() - started
        choices = data.get("choices") or []
        usage = data.get("usage") or {}
        prompt_tokens = int(usage.get("prompt_tokens") or 0)
        completion_total = int(usage.get("completion_tokens") or 0)
        model = str(data.get("model") or self.config.model)

        texts, reasons = [], []
        for choice in choices:
            content = (choice.get("message") or {}).get("content") or ""
            text, cut = cut_at_stop(content, sampling.stop)  # in case the server ignored `stop`
            texts.append(text)
            reasons.append("stop" if cut else (choice.get("finish_reason") or "stop"))
        # Servers report one completion-token total for the whole request.
        shares = split_evenly(completion_total, [max(len(t), 1) for t in texts])
        self._meter.add(requests=1, completions=len(texts), prompt_tokens=prompt_tokens,
                        completion_tokens=completion_total, latency_s=latency)
        return [Completion(text, reason, prompt_tokens, share, latency, model)
                for text, reason, share in zip(texts, reasons, shares)]

    # -- HTTP ---------------------------------------------------------------------------------

    def _post_with_retries(self, body: bytes) -> dict[str, Any]:
        attempts = self.config.max_retries + 1
        attempt = 0
        while True:
            try:
                with self._slots:
                    return self._post(body)
            except urllib.error.HTTPError as exc:
                status, message = exc.code, self._server_message(exc)
                retry_after = _retry_after_s(exc.headers.get("Retry-After"))
                if not (status in _RETRY_STATUSES or status >= 500):
                    raise self._status_error(status, message) from None
                reason = f"HTTP {status}: {message}"
            except (TimeoutError, ConnectionError, http.client.HTTPException,
                    urllib.error.URLError) as exc:
                status, retry_after = None, None
                reason = self._redact(_describe(exc, self.config.timeout_s))
            attempt += 1
            if attempt == attempts:
                raise EndpointError(
                    f"POST {self.url} failed after {attempts} attempt(s); last: {reason}",
                    status=status, url=self.url) from None
            delay = self._backoff(attempt - 1, retry_after)
            log.warning("POST %s: %s; retrying in %.1fs (attempt %d of %d)",
                        self.url, reason, delay, attempt + 1, attempts)
            self._meter.add(retries=1)
            time.sleep(delay)

    def _post(self, body: bytes) -> dict[str, Any]:
        request = urllib.request.Request(self.url, data=body, method="POST", headers={
            "Content-Type": "application/json", "Accept": "application/json",
            "User-Agent": "mleforge"})
        key = os.environ.get(self.config.api_key_env)
        if key:
            request.add_unredirected_header("Authorization", f"Bearer {key}")
        with urllib.request.urlopen(request, timeout=self.config.timeout_s) as response:
            raw = response.read()
        try:
            data = json.loads(raw)
        except ValueError:
            raise EndpointError(f"{self.url} answered with something that is not JSON: "
                                f"{self._redact(raw[:300].decode(errors='replace'))!r}",
                                url=self.url) from None
        if not isinstance(data, dict):
            raise EndpointError(f"{self.url} answered with JSON that is not an object", url=self.url)
        return data

    def _backoff(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return min(retry_after, self.config.backoff_max_s)
        with self._jitter_lock:
            jitter = self._jitter.uniform(0.5, 1.5)  # spreads retries of concurrent requests apart
        return min(self.config.backoff_s * 2**attempt * jitter, self.config.backoff_max_s)

    def _status_error(self, status: int, message: str) -> EndpointError:
        if status in (401, 403):
            text = (f"{self.url} refused the request (HTTP {status}: {message}); "
                    f"check the key in ${self.config.api_key_env}")
        elif status == 404:
            text = (f"model {self.config.model!r} not served at {self.config.base_url} "
                    f"(HTTP 404: {message}); check the model name, and that base_url ends "
                    f"where /chat/completions is served (usually .../v1)")
        else:
            text = f"{self.url} rejected the request (HTTP {status}: {message})"
        return EndpointError(text, status=status, url=self.url)

    def _server_message(self, exc: urllib.error.HTTPError) -> str:
        try:
            raw = exc.read().decode(errors="replace")
        except (OSError, http.client.HTTPException):
            raw = ""
        message = raw
        try:
            data = json.loads(raw)
            error = data.get("error", data) if isinstance(data, dict) else data
            if isinstance(error, dict):
                message = error.get("message") or error.get("detail") or raw
            elif isinstance(error, str):
                message = error
        except ValueError:
            pass
        message = " ".join(str(message).split())[:500] or (exc.reason or "no message")
        return self._redact(message)

    def _redact(self, text: str) -> str:
        key = os.environ.get(self.config.api_key_env)
        if key:
            text = text.replace(key, "***")
        return _BEARER.sub("Bearer ***", text)


def _retry_after_s(value: str | None) -> float | None:
    """Seconds from a Retry-After header: a number, or an HTTP date."""
    if not value:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(when.timestamp() - time.time(), 0.0)


def _describe(exc: BaseException, timeout_s: float) -> str:
    if isinstance(exc, TimeoutError) or isinstance(getattr(exc, "reason", None), TimeoutError):
        return f"no answer within {timeout_s:g}s"
    if isinstance(exc, urllib.error.URLError):
        return f"cannot connect: {exc.reason}"
    return f"{type(exc).__name__}: {exc}"
