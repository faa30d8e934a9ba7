"""The seam between the GRPO trainer and whatever generates its rollouts.

Three ways to generate, chosen by `TrainConfig.generation`:

    trl      TRL samples with the training model itself (transformers' generate)
    vllm     TRL's vLLM integration (colocated on the training GPU), weights synced each step
    ct2      CTranslate2 (mleforge.train.grpo.ct2_rollout; extra `[fast]`): the trained weights
             converted and reloaded after each step, each group's prompt prefilled once
    <name>   another engine registered here: it becomes TRL's `rollout_func`

`auto` is vLLM on a GPU where it is installed (else TRL's own generate), and ct2 on a CPU
where ctranslate2 is installed and converts the model (else TRL's own generate). On a CPU,
ct2 rollouts sample at the training weights' type, float32 (TRL 1.16 applies its
importance-sampling correction only on its vLLM path, so they must sample from the training
distribution; int8 samples measurably further from it), and even so generate faster than
TRL's generate (`python benchmarks/policies.py` measures the engines' generation and sync;
`python benchmarks/train_step.py` whole GRPO steps, where the update is most of a step
either way).

An engine is a factory `factory(config, tokenizer) -> rollout(prompts, trainer)`. `rollout`
receives this rank's rows of the step (chat messages; each group's prompt `group_size`
times in a row, so an engine that prefills once per distinct prompt can) and returns
`{"prompt_ids": [...], "completion_ids": [...], "logprobs": None | [...]}` in the training
tokenizer's ids, one row per prompt. Logprobs of the sampled tokens let TRL correct for an
engine that samples from slightly different weights (int8, last step's sync); None means
the engine samples from the training weights. Sampling must depend only on the trainer's
per-step seed (torch's RNG is seeded at each step's generation) so that a resumed run
repeats its rollouts. An engine may also report what a step cost it beyond generating
(`take_figures(step) -> {"sync_s": ..., "rollout_staleness": ...}`, see `rollout_figures`):
metrics.jsonl logs them. Tests register engines of their own here.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from mleforge.errors import ConfigError, MissingExtra
from mleforge.train.errors import TrainError

if TYPE_CHECKING:
    from mleforge.train.config import TrainConfig

BUILT_IN = ("trl", "vllm")
RolloutFunc = Callable[[list, Any], dict]
EngineFactory = Callable[[Any, Any], RolloutFunc]


def _ct2(config: TrainConfig, tokenizer: Any) -> RolloutFunc:
    # Imports torch and ctranslate2: only when a run generates with it.
    from mleforge.train.grpo.ct2_rollout import Ct2Rollout

    return Ct2Rollout(config, tokenizer)


_ENGINES: dict[str, EngineFactory] = {"ct2": _ct2}
# What each engine's extra is checked by before anything heavy starts: (module, package, extra).
_EXTRAS = {"ct2": ("ctranslate2", "ctranslate2", "fast")}


def register_engine(name: str, factory: EngineFactory, *, replace: bool = False) -> None:
    """Make `generation: <name>` build its rollout function with `factory(config, tokenizer)`."""
    if name in BUILT_IN or name == "auto" or not name:
        raise ValueError(f"{name!r} is a built-in generation mode; pick another engine name")
    if name in _ENGINES and not replace and _ENGINES[name] is not factory:
        raise ValueError(f"an engine is already registered as {name!r}; pass replace=True to override it")
    _ENGINES[name] = factory


def engine_names() -> list[str]:
    return ["auto", *BUILT_IN, *sorted(_ENGINES)]


def vllm_installed() -> bool:
    return importlib.util.find_spec("vllm") is not None


def ct2_installed() -> bool:
    return importlib.util.find_spec("ctranslate2") is not None


def resolve_generation(requested: str, *, cuda: bool, converts: Callable[[], bool] | None = None) -> str:
    """`auto`: on a GPU vLLM where it is installed, on a CPU ct2 where ctranslate2 is installed
    and `converts()` says the model converts (no `converts`: not asked), else TRL's own
    generate. An explicit choice that cannot work here is refused with the fix."""
    if requested == "auto":
        if cuda:
            return "vllm" if vllm_installed() else "trl"
        return "ct2" if converts is not None and ct2_installed() and converts() else "trl"
    if requested == "vllm":
        if not vllm_installed():
            raise TrainError("generation vllm needs the vllm package (pip install vllm, on a CUDA machine); "
                             "or use --generation trl")
        if not cuda:
            raise TrainError("generation vllm needs a CUDA GPU; on a CPU use --generation trl")
        return requested
    if requested != "trl" and requested not in _ENGINES:
        raise ConfigError(f"generation: got {requested!r}; expected one of {', '.join(engine_names())}")
    if requested in _EXTRAS:
        module, package, extra = _EXTRAS[requested]
        if importlib.util.find_spec(module) is None:
            raise MissingExtra(package, extra, f"generation {requested} (GRPO rollouts on {package})")
    return requested


def trl_generation_args(config: TrainConfig, backend: str) -> dict[str, Any]:
    """The GRPOConfig fields of the generation: sampling settings and the backend."""
    args: dict[str, Any] = {
        "max_completion_length": config.max_new_tokens, "temperature": config.temperature,
        "top_p": config.top_p, "top_k": 0,  # 0: no top-k cut; the sampling settings alone decide
    }
    if backend == "vllm":
        args.update(use_vllm=True, vllm_mode="colocate", vllm_enable_sleep_mode=False)
    return args


def rollout_func_for(backend: str, config: TrainConfig, tokenizer: Any) -> RolloutFunc | None:
    """TRL's `rollout_func` for a registered engine; None for TRL's own generation paths."""
    if backend in BUILT_IN:
        return None
    return _ENGINES[backend](config, tokenizer)


def rollout_figures(rollout: RolloutFunc | None, step: int) -> dict[str, float]:
    """What `rollout` reported for `step` (taken once): its weight sync's seconds and the
    staleness of the weights it sampled from; {} for TRL's own generation and engines that
    report nothing."""
    take = getattr(rollout, "take_figures", None)
    return dict(take(step)) if callable(take) else {}


def close_rollout(rollout: RolloutFunc | None) -> None:
    """Release what an engine holds (its converted weights) at the end of training."""
    close = getattr(rollout, "close", None)
    if callable(close):
        close()
