"""The CTranslate2 engine: a converted model (int8 on a CPU), several times faster than transformers.

    engine = Ct2Engine(folder, tokenizer, eos_ids)            # a cached conversion (ct2_convert)
    engine = Ct2Engine.from_model(model, tokenizer)           # a trainer's model, in memory
    report = engine.sync(model)                               # after each optimizer step
    engine, report = refresh_engine(model, tokenizer, engine) # the same, one call for both

How it generates (`python benchmarks/policies.py --engines ct2-int8 --batches 1 4 --group 4`
times prefill and decoding for copies of a prompt against one prompt with several samples):
- The prompt goes in whole (`include_prompt_in_result=False`): ctranslate2 then forwards it in
  one pass instead of one decoding step per prompt token.
- The n samples of one prompt are one input with `num_hypotheses=n`: the prompt is prefilled
  once and its state copied n times. n copies of the prompt would prefill it n times. The
  copies are whole: each sample holds the prompt's keys and values, and for a grouped-query
  model ctranslate2 keeps them per query head (Qwen2.5-0.5B: 14 heads of 2 key/value heads,
  ~168 KiB a token in float32). So a group's memory grows with n x (prompt + completion)
  tokens: about 1,500 MiB above the weights for 4 samples of a 1,250-token prompt
  (`python benchmarks/memory.py --phases rollout_generate`).
- Prompts share a batch only when their lengths differ by at most RAGGED_TOKENS: ctranslate2
  prefills a batch up to its shortest prompt and feeds the rest one decoding step at a time,
  so a batch of ragged prompts costs more than the prefill it shares saves.
- Stop strings end a row early through the per-token callback, as `stop_strings` does in
  transformers, and the same callback collects each token's log-probability when asked.
- Seeds: ctranslate2 seeds a generator thread's random numbers once, at its first sample, from
  the process-wide `set_random_seed`. So a seeded call that samples starts a fresh generator
  (it reloads the converted files, cheap beside a generation) and seeds it under a process-wide lock;
  the same seed and prompts then give the same samples, whatever ran before.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from mleforge.policies.base import PolicyError, SamplingConfig
from mleforge.policies.engines.base import Generation, Sample
from mleforge.policies.engines.ct2_convert import convert_model, default_quantization
from mleforge.policies.engines.transformers import eos_token_ids
from mleforge.policies.extras import import_ctranslate2
from mleforge.utils.memory import release_memory

RAGGED_TOKENS = 16
_SEED_LOCK = threading.Lock()  # set_random_seed is process-wide; see the module docstring


@dataclass(frozen=True)
class SyncReport:
    """What handing new weights to the engine cost: converting (copy, LoRA merge, quantize,
    write) and loading them."""

    convert_s: float
    load_s: float
    bytes: int
    quantization: str

    @property
    def total_s(self) -> float:
        return self.convert_s + self.load_s

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "total_s": self.total_s}


class Ct2Engine:
    """Samples from a CTranslate2 model folder with the model's own tokenizer.

    `eos_ids` end a sequence (the tokenizer's and the generation config's); `num_threads` is
    ctranslate2's `intra_threads` (None: its default); `max_batch_size` bounds the sequences
    (prompts x samples) generated together; `context_length` is the model's, for the policy's
    check. `owned_folder=True` deletes the folder when the engine closes or syncs.
    """

    name = "ct2"

    def __init__(self, folder: str | Path, tokenizer: Any, eos_ids: Sequence[int], *,
                 device: str = "cpu", num_threads: int | None = None,
                 max_batch_size: int = 16, context_length: int | None = None,
                 quantization: str | None = None, owned_folder: bool = False):
        self._ct2 = import_ctranslate2()
        self._tokenizer = tokenizer
        self.eos_ids = tuple(eos_ids)
        self._device, self._threads = device, num_threads
        self._max_batch_size, self._context = max_batch_size, context_length
        self.quantization = quantization
        self._folder, self._owned = Path(folder), owned_folder
        self._generator: Any = None
        self._sampled = False  # whether the generator's random numbers were seeded already
        self.last_sync: SyncReport | None = None  # set by from_model and sync
        self.conversion: Any = None  # the CachedConversion it loaded, set by the policy
        self.load_s = 0.0
        self.temp_root: str | Path | None = None  # where sync puts its conversions (from_model)
        self._load()

    @classmethod
    def from_model(cls, model: Any, tokenizer: Any, *, quantization: str | None = None,
                   device: str = "cpu", num_threads: int | None = None,
                   max_batch_size: int = 16, temp_root: str | Path | None = None) -> Ct2Engine:
        """An engine on an in-memory transformers model (a peft model's LoRA merged), converted
        into a temporary folder that the engine deletes when it closes (and syncs). The folders
        are made in `temp_root` (None: the system's temporary directory), so a trainer can keep
        them where it can clean up after a killed process."""
        quantization = quantization or default_quantization(device.split(":")[0])
        started = time.perf_counter()
        folder = _temporary_folder(temp_root)
        try:  # a conversion or load that fails (a full disk, say) leaves no folder behind
            convert_model(model, tokenizer, folder, quantization)
            engine = cls(folder, tokenizer, eos_token_ids(getattr(model, "generation_config", None),
                                                          tokenizer),
                         device=device, num_threads=num_threads, max_batch_size=max_batch_size,
                         context_length=getattr(model.config, "max_position_embeddings", None),
                         quantization=quantization, owned_folder=True)
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        engine.temp_root = temp_root
        engine.last_sync = SyncReport(time.perf_counter() - started - engine.load_s,
                                      engine.load_s, _size(folder), quantization)
        return engine

    def sync(self, model: Any) -> SyncReport:
        """Replace the engine's weights by `model`'s (the trainer's, after an optimizer step):
        convert into a new temporary folder, load it, delete the old one if the engine owns it.
        The tokenizer and settings stay. Whatever fails, one folder is left: the old one if the
        conversion failed (the engine loads it again), else the new one (which close deletes).
        The old weights are let go before the conversion, not after it: they are of no use
        while it runs, and holding them would add a whole model to the sync's peak memory."""
        quantization = self.quantization or default_quantization(self._device.split(":")[0])
        started = time.perf_counter()
        folder = _temporary_folder(self.temp_root)
        self._generator = None
        try:
            convert_model(model, self._tokenizer, folder, quantization)
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            self._load()  # the old weights again: the engine works as before the sync
            raise
        convert_s = time.perf_counter() - started
        old, old_owned = self._folder, self._owned
        self._folder, self._owned, self.quantization = folder, True, quantization
        try:
            load_s = self._load()  # frees the old weights first: the old folder is of no use after
        finally:
            if old_owned:
                shutil.rmtree(old, ignore_errors=True)
        self.last_sync = SyncReport(convert_s, load_s, _size(folder), quantization)
        return self.last_sync

    @property
    def folder(self) -> Path:
        return self._folder

    @property
    def generator(self) -> Any:
        """The `ctranslate2.Generator` (benchmarks drive it directly, at fixed lengths)."""
        return self._generator

    @property
    def context_length(self) -> int | None:
        return self._context

    def describe(self) -> dict[str, Any]:
        compute = getattr(self._generator, "compute_type", None)
        out = {"engine": self.name, "device": self._device, "quantization": self.quantization,
               "compute_type": compute, "model_dir": str(self._folder),
               "ctranslate2": self._ct2.__version__, "load_s": round(self.load_s, 3)}
        if self.conversion is not None:
            out.update(converted_now=self.conversion.built,
                       convert_s=round(self.conversion.convert_s, 3))
        if self.last_sync is not None:
            out["last_sync"] = self.last_sync.to_dict()
        return out

    def release(self) -> None:
        """Let the weights go until the next `sync` loads new ones (the folder stays): what a
        GRPO trainer calls after a step's rollouts when the next step syncs anyway, so that
        the update does not run beside a whole idle copy of the model. Generating in between
        is refused as after `close`."""
        self._generator = None
        release_memory()

    @property
    def released(self) -> bool:
        """Whether `release` let the weights go (and no sync or `reload` has loaded any since)."""
        return self._generator is None and self._folder.is_dir()

    def reload(self) -> float:
        """Load the weights of the last sync again after `release`; the seconds it took."""
        return self._load()

    def close(self) -> None:
        self._generator = None
        if self._owned:
            shutil.rmtree(self._folder, ignore_errors=True)
            self._owned = False

    def _load(self) -> float:
        """(Re)build the generator from the folder; the seconds it took."""
        device, _, index = self._device.partition(":")
        self._generator = None  # free the old weights before the new ones load
        started = time.perf_counter()
        try:
            self._generator = self._ct2.Generator(
                str(self._folder), device=device, device_index=int(index or 0),
                intra_threads=self._threads or 0)
        except (RuntimeError, ValueError, OSError) as exc:
            raise PolicyError(f"ctranslate2 cannot load the model in {self._folder}: {exc}") \
                from exc
        self._sampled = False
        self.load_s = time.perf_counter() - started
        return self.load_s

    # --- generation ---

    def generate(self, prompts: Sequence[Sequence[int]], n: int, sampling: SamplingConfig,
                 seed: int, *, logprobs: bool = False) -> Generation:
        """`n` samples per prompt. With `logprobs=True` each sample carries log p(token) as
        ctranslate2 scores it: the log-softmax of the model's logits at temperature 1, before
        top-p (the temperature only shapes the sampling)."""
        if self._generator is None:
            raise PolicyError("the ct2 engine was closed (or released until its next sync)")
        draws = 1 if sampling.greedy else n  # greedy decoding gives one answer
        plan = plan_groups([len(p) for p in prompts], draws, self._max_batch_size)
        samples: list[list[Sample]] = [[] for _ in prompts]
        prompt_tokens, latency = 0, 0.0
        with _SEED_LOCK:
            if not sampling.greedy:
                if self._sampled:
                    self._load()  # a fresh generator thread, so that the seed below applies
                self._ct2.set_random_seed(seed)
            for indices, hypotheses in plan:
                batch = self._generate_batch([prompts[i] for i in indices], hypotheses,
                                             sampling, logprobs)
                for i, got in zip(indices, batch):
                    samples[i].extend(got)
                prompt_tokens += sum(len(prompts[i]) for i in indices)
                latency += batch[0][0].latency_s
            self._sampled = self._sampled or not sampling.greedy
        if draws < n:
            samples = [got * n for got in samples]
        return Generation(samples, len(plan), prompt_tokens, latency)

    def _generate_batch(self, prompts: list[Sequence[int]], hypotheses: int,
                        sampling: SamplingConfig, logprobs: bool) -> list[list[Sample]]:
        rows = _Rows(self._tokenizer, self.eos_ids, sampling.stop, logprobs)
        options: dict[str, Any] = {
            "max_length": sampling.max_new_tokens, "include_prompt_in_result": False,
            "num_hypotheses": hypotheses, "end_token": list(self.eos_ids),
            "return_scores": logprobs, "callback": rows.step}
        if sampling.greedy:
            options["sampling_topk"] = 1
        else:
            # topk=0: the whole vocabulary, as the transformers engine samples (top_k=0).
            options.update(sampling_topk=0, sampling_topp=sampling.top_p,
                           sampling_temperature=sampling.temperature)
        starts = [self._tokenizer.convert_ids_to_tokens(list(p)) for p in prompts]
        started = time.perf_counter()
        self._generator.generate_batch(starts, **options)
        latency = time.perf_counter() - started
        if rows.error is not None:
            raise rows.error
        return [[rows.sample(b, h, latency) for h in range(hypotheses)]
                for b in range(len(prompts))]


def refresh_engine(model: Any, tokenizer: Any, engine: Ct2Engine | None = None,
                   **options: Any) -> tuple[Ct2Engine, SyncReport]:
    """What a GRPO trainer calls after each optimizer step: a ct2 engine on `model`'s current
    weights (LoRA merged, the model left as it is) and what the hand-over cost.

    The first call (`engine=None`) builds one (`options` go to `Ct2Engine.from_model`:
    quantization, device, num_threads, max_batch_size); later calls sync that engine.
    """
    if engine is None:
        engine = Ct2Engine.from_model(model, tokenizer, **options)
        return engine, engine.last_sync  # type: ignore[return-value]
    if options:
        raise ValueError(f"options ({', '.join(options)}) are fixed when the engine is built")
    return engine, engine.sync(model)


class _Rows:
    """Collects the tokens ctranslate2 reports step by step, per (prompt, hypothesis), and
    tells it to stop a row whose text now holds a stop string."""

    def __init__(self, tokenizer: Any, eos_ids: Sequence[int], stop: Sequence[str],
                 logprobs: bool):
        self._tokenizer, self._eos, self._stop, self._logprobs = tokenizer, set(eos_ids), stop, logprobs
        # Enough trailing tokens to hold any stop string, even one byte per token.
        self._window = 4 * max((len(s) for s in stop), default=0) + 8
        self._tokens: dict[tuple[int, int], list[int]] = {}
        self._scores: dict[tuple[int, int], list[float]] = {}
        self._ended: set[tuple[int, int]] = set()
        self.error: BaseException | None = None

    def step(self, result: Any) -> bool:
        """ctranslate2's callback, run on its thread: True stops this row."""
        try:
            key = (result.batch_id, result.hypothesis_id)
            tokens = self._tokens.setdefault(key, [])
            tokens.append(result.token_id)
            if self._logprobs:
                self._scores.setdefault(key, []).append(result.log_prob)
            if result.token_id in self._eos:
                self._ended.add(key)
                return False  # it ends there anyway
            if self._stop:
                tail = self._tokenizer.decode(tokens[-self._window:], skip_special_tokens=True)
                if any(s in tail for s in self._stop):
                    self._ended.add(key)
                    return True
            return False
        except BaseException as exc:  # an exception must not cross into ctranslate2's thread
            self.error = exc
            return True

    def sample(self, batch_id: int, hypothesis: int, latency: float) -> Sample:
        key = (batch_id, hypothesis)
        if key not in self._tokens:
            raise PolicyError(f"ctranslate2 reported no tokens for input {batch_id}, "
                              f"hypothesis {hypothesis}")
        scores = tuple(self._scores[key]) if self._logprobs else None
        return Sample(tuple(self._tokens[key]), "stop" if key in self._ended else "length",
                      latency, scores)


def plan_groups(lengths: Sequence[int], samples: int, max_batch_size: int,
                ragged_tokens: int = RAGGED_TOKENS) -> list[tuple[list[int], int]]:
    """Batches of (prompt indices, hypotheses each) with at most `max_batch_size` sequences.

    A prompt that needs more samples than fit gets batches of its own. Otherwise prompts are
    taken shortest first, and a batch closes when it is full or the next prompt is more than
    `ragged_tokens` longer than its first.
    """
    if samples >= max_batch_size:
        return [([i], min(max_batch_size, samples - done))
                for i in range(len(lengths)) for done in range(0, samples, max_batch_size)]
    per_batch = max_batch_size // samples
    batches: list[tuple[list[int], int]] = []
    for i in sorted(range(len(lengths)), key=lambda i: (lengths[i], i)):
        current = batches[-1][0] if batches else None
        if current and len(current) < per_batch and lengths[i] - lengths[current[0]] <= ragged_tokens:
            current.append(i)
        else:
            batches.append(([i], samples))
    return batches


def _temporary_folder(root: str | Path | None = None) -> Path:
    if root is not None:
        Path(root).mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix="mleforge-ct2-", dir=root))


def _size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.iterdir() if p.is_file())
