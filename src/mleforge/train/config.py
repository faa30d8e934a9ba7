"""What a training run does: one dataclass per component; the defaults are the source of truth.

The defaults are the `cpu` preset, the main job (`mleforge train` with no arguments): the
bundled Qwen2.5-Coder-0.5B with LoRA, on the lite tasks, on a CPU. A GRPO step there costs
a generation (CTranslate2, a group's prompt prefilled once) and a forward and backward pass
over the group's prompt once and each completion (mleforge.train.trainer), and the prompt is
most of those tokens: the compact
profile's 1,200-1,520 for improve states (the full improve prompt of titanic is 3,600). So a
step holds one state x 4 rollouts at temperature 0.8, completions are capped at 192 tokens
(the template expert's short compact edits are 55-188), the seeds are the debug and improve
states of expert journals (their answers are such edits; no empty drafts), 4 steps at lr
5e-5, and an --sft auto warm start of 22 single-sample steps at lr 2e-4 (8 at 1e-4 left 7 of
8 step-wise completions malformed, 12 at 4e-4 left 2 of 8 malformed and 5 of 8 valid; 22 at
2e-4 gave 7-8 of 8 valid). The updates run the prompt without a graph (ModelConfig.prompt_grad).
Measured on 2 cores (README, "The main job in 21 minutes"): the evaluation before beside the
collection 6:00, the warm start 5:58, GRPO 6:57 (a step: generation 34-48 s, sync 12-14 s,
execution 6-58 s, update 20-22 s), the whole job 21:09 alone (24:38 with the warm start's own
evaluation and the two in sequence; a slower spell of the same machine took 38 min for that);
4 of 8 step-wise states valid after GRPO, and 7 of 8 after the warm start where it was evaluated.
`gpu-1x` (`PRESETS`) overrides them for one GPU. Values are checked here, without touching the file
system; what depends on the machine (extras, the model, the tasks) is checked by
`mleforge.train.grpo.preflight` before anything heavy starts.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, ClassVar

from mleforge.agent.prompt_config import PromptConfig
from mleforge.curriculum.config import SAMPLER_KINDS, BufferConfig, LearnabilityConfig
from mleforge.errors import ConfigError
from mleforge.policies.engines.base import ENGINE_CHOICES, QUANTIZATIONS
from mleforge.reward import RewardConfig
from mleforge.train.prompt_renderer import compact_prompt

DTYPES = ("auto", "float32", "bfloat16", "float16")
DEVICES = ("auto", "cpu", "cuda")
STAGES = ("draft", "debug", "improve")
EXECUTORS = ("auto", "local", "pool", "ray")  # auto: the warm pool as root (isolated there), else local
# TRL 1.16's GRPOConfig.loss_type and scale_rewards values.
LOSS_TYPES = ("grpo", "dr_grpo", "dapo", "bnpo", "cispo", "sapo", "luspo", "vespo")
SCALE_REWARDS = ("group", "batch", "none")
LR_SCHEDULERS = ("constant", "constant_with_warmup", "linear", "cosine")
PRESET_NAMES = ("cpu", "gpu-1x")
SFT_MODES = ("auto", "none")  # or the path of an `mleforge sft` checkpoint


def _integer(key: str, value: Any, low: int, fix: str = "", optional: bool = False) -> None:
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ConfigError(f"{key}: got {value!r}; expected an integer >= {low}{fix}")


def _number(key: str, value: Any, *, low: float | None = None, strict: bool = False, fix: str = "") -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(f"{key}: got {value!r}; expected a finite number{fix}")
    if low is not None and (value <= low if strict else value < low):
        raise ConfigError(f"{key}: got {value!r}; expected {'>' if strict else '>='} {low}{fix}")


def _choice(key: str, value: Any, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ConfigError(f"{key}: got {value!r}; expected one of {', '.join(choices)}")


def _flag(key: str, value: Any, optional: bool = False) -> None:
    if not (isinstance(value, bool) or (optional and value is None)):
        raise ConfigError(f"{key}: got {value!r}; expected true or false{' (or null: auto)' if optional else ''}")


def _known(cls: type, data: dict[str, Any]) -> None:
    unknown = sorted(set(data) - {f.name for f in fields(cls)})
    if unknown:
        raise ConfigError(f"{cls.__name__}: unknown keys {', '.join(unknown)}; known: "
                          f"{', '.join(f.name for f in fields(cls))}")


@dataclass(frozen=True)
class ModelConfig:
    """The model to train and how.

    spec: `bundled:NAME` or `hf:PATH` (a transformers folder, or a checkpoint of `mleforge
    sft`/`train`: an adapter that names its base). full: train every weight instead of a
    LoRA adapter. lora_rank 16, alpha 2 x rank, on every linear layer ("all-linear"): the
    usual LoRA setting; 0.5B x rank 16 is ~9M trainable weights. dtype "auto": bfloat16 on
    a GPU that has it, float32 on a CPU (see `mleforge.train.model`). gradient_checkpointing
    recomputes the forward pass in the backward one: off on the cpu preset, where one
    sequence of ~1,500 tokens a micro-batch keeps a few GB of activations and the recompute
    made a LoRA update 1.5x slower (Qwen-0.5B, 2 x 400 tokens: 115 s with it, 75 s without,
    measured here); on for gpu-1x's larger micro-batches. threads: torch's CPU threads (None:
    torch's default). lora_layers: the adapter goes on the last this many decoder layers
    only (all of them in a model that has fewer; None: every layer, the default). The
    backward pass then stops at the lowest adapted layer: a 1,350-token LoRA step of
    Qwen-0.5B took 22.7 s on its top 12 of 24 layers and 17.3 s on its top 8, against 28.4 s
    on all of them (benchmarks/lora_layers.py, one run). It is not the cpu preset's: the
    main job with 12 (and 5 expert steps) took its warm start from 16:58 to 9:17, but left 4
    of 8 step-wise states malformed and 3 of 8 valid (mean reward -0.035 ± 0.127) against 1
    and 7 (0.352 ± 0.105); with 12 on the usual 22 samples, 1 and 5 (0.129 ± 0.121).
    prompt_grad: off (the cpu preset's), an update runs a sequence's prompt but its last token
    without a graph, through a key/value cache the completion then attends to (on a device
    without Triton, and in `mleforge sft`'s completion-only path): the same losses and
    log-probabilities, and the gradient less its path through the prompt's keys and values, so
    the backward pass covers the completion's ~130-192 positions instead of ~1,400. On is the
    exact gradient (gpu-1x's, which checkpoints activations: that turns the cache off). A config
    written before the setting existed reads as on, which is what it ran (LEGACY).
    """

    # What a run whose config was written before these settings existed ran with: a resumed run
    # (mleforge.train.grpo.load_run_config) and mleforge sft's same-run check read a missing key so.
    LEGACY: ClassVar[dict[str, Any]] = {"prompt_grad": True}

    spec: str = "bundled:qwen2.5-coder-0.5b"
    full: bool = False
    lora_rank: int = 16
    lora_alpha: float | None = None
    lora_dropout: float = 0.0
    target_modules: str = "all-linear"
    dtype: str = "auto"
    device: str = "auto"
    gradient_checkpointing: bool = False
    threads: int | None = None
    lora_layers: int | None = None
    prompt_grad: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.spec, str) or not self.spec.strip():
            raise ConfigError("model.spec: name a model, as in bundled:qwen2.5-coder-0.5b or hf:./checkpoint")
        _flag("model.full", self.full)
        _integer("model.lora_rank", self.lora_rank, 1, " (--lora-rank 16 is usual)")
        if self.lora_alpha is not None:
            _number("model.lora_alpha", self.lora_alpha, low=0.0, strict=True)
        _number("model.lora_dropout", self.lora_dropout, low=0.0)
        if self.lora_dropout >= 1:
            raise ConfigError(f"model.lora_dropout: got {self.lora_dropout}; expected a probability below 1")
        if not isinstance(self.target_modules, str) or not self.target_modules.strip():
            raise ConfigError("model.target_modules: give 'all-linear' or comma-separated module names")
        _choice("model.dtype", self.dtype, DTYPES)
        _choice("model.device", self.device, DEVICES)
        _flag("model.gradient_checkpointing", self.gradient_checkpointing)
        _integer("model.threads", self.threads, 1, optional=True)
        _integer("model.lora_layers", self.lora_layers, 1, " (or leave it out: every layer)", optional=True)
        _flag("model.prompt_grad", self.prompt_grad)
        if not self.prompt_grad and self.gradient_checkpointing:
            raise ConfigError("model.prompt_grad off runs the prompt without a graph through a key/value cache, "
                              "which activation checkpointing turns off: turn gradient_checkpointing off, or "
                              "prompt_grad on")

    @property
    def alpha(self) -> float:
        return float(self.lora_alpha) if self.lora_alpha is not None else 2.0 * self.lora_rank

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelConfig:
        _known(cls, data)
        return cls(**data)


@dataclass(frozen=True)
class SFTConfig:
    """`mleforge sft`: fine-tune on expert samples (ML-Agent's exploration-enriched SFT).

    samples: a JSONL file of samples, or a folder of them (see mleforge.train.samples). out:
    the run directory. lr 1e-4 is the usual LoRA rate; for full fine-tuning ML-Agent used
    2e-5. max_length: prompt + completion tokens; longer samples are left out (and counted),
    never cut, since a cut completion teaches a broken action. stages: keep only samples of
    these stages (None: all). loss_samples: the completion loss before and after training is
    measured on a seeded subset of this many samples (a forward pass each, twice: on 2 CPU
    cores about 9 s per 1,500-token sample).
    """

    samples: str = ""
    out: str = ""
    model: ModelConfig = field(default_factory=ModelConfig)
    epochs: float = 2.0
    max_steps: int | None = None
    lr: float = 1e-4
    batch_size: int = 2
    grad_accum: int = 4
    max_length: int = 4096
    save_steps: int = 50
    stages: tuple[str, ...] | None = None
    bf16: bool | None = None
    loss_samples: int = 32
    seed: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.model, dict):
            object.__setattr__(self, "model", ModelConfig.from_dict(self.model))
        if not isinstance(self.samples, str) or not self.samples:
            raise ConfigError("sft.samples: give the samples' JSONL file (or a folder of them), as "
                              "`mleforge collect` writes")
        if not isinstance(self.out, str) or not self.out:
            raise ConfigError("sft.out: give the run directory to write")
        _number("sft.epochs", self.epochs, low=0.0, strict=True)
        _integer("sft.max_steps", self.max_steps, 1, optional=True)
        _number("sft.lr", self.lr, low=0.0, strict=True, fix=" (1e-4 for LoRA, 2e-5 for full fine-tuning)")
        _integer("sft.batch_size", self.batch_size, 1)
        _integer("sft.grad_accum", self.grad_accum, 1)
        _integer("sft.max_length", self.max_length, 16)
        _integer("sft.save_steps", self.save_steps, 1)
        if self.stages is not None:
            object.__setattr__(self, "stages", tuple(self.stages))
            for stage in self.stages:
                _choice("sft.stages", stage, STAGES)
        _flag("sft.bf16", self.bf16, optional=True)
        _integer("sft.loss_samples", self.loss_samples, 1)
        _integer("sft.seed", self.seed, 0)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["stages"] = None if self.stages is None else list(self.stages)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SFTConfig:
        _known(cls, data)
        return cls(**data)


@dataclass(frozen=True)
class TrainConfig:
    """`mleforge train`: step-wise GRPO on states from the evolving buffer.

    A step draws `groups_per_step` states (by `sampler`) and samples `group_size`
    completions of each; the reward executes every one. `micro_batch` sequences go through
    one forward/backward pass; a step accumulates groups_per_step x group_size /
    micro_batch of them into one optimizer step (TRL generates the step's batch once).
    micro_batch None: one group's size, so that on a device without Triton (a CPU) a group's
    shared prompt goes through the model once for all its completions
    (mleforge.train.trainer.completion_logps). TRL shuffles a step's sequences before it splits
    them; there the trainer re-splits them by prompt, so that a micro-batch of one group's size
    holds one group however many groups a step has.

    sft: "auto" collects expert samples with the template expert and fine-tunes briefly
    first (ML-Agent's SFT before RL: `sft_steps` optimizer steps of sft_batch_size x
    sft_grad_accum samples); "none" starts from `model`; a path starts from that `mleforge
    sft` checkpoint. journals: a folder of collected runs whose journals seed the
    buffer (None: made on the fly by the template expert, `expert_steps` per task).
    seed_stages: the journal states kept as seeds (each task's empty draft only where drafts are
    among them, or where the task has no other seed).
    run_timeout_s caps a rollout's script below the task's own limit (600 s): a step waits
    for its slowest run. save_steps: a checkpoint every this many steps; a resume replays
    at most that many, so the buffer must keep evicted rows at least as long
    (buffer.retain_evicted_steps). generation: "auto" (on a GPU vLLM through TRL where it is
    installed, on a CPU ct2 where ctranslate2 is installed and converts the model, else TRL's
    own generate; mleforge.train.generation), "trl", "vllm", or an engine
    registered with `mleforge.train.generation.register_engine`, such as "ct2" (CTranslate2
    rollouts, mleforge.train.ct2_rollout). rollout_quantization: the ct2 rollouts' weight type
    (None: the training weights' own, float32 on a CPU: TRL 1.16 corrects for an engine that
    samples from other weights only on its vLLM path, so the rollouts sample from the training
    distribution unless asked otherwise; int8 generated ~1.3x faster on SmolLM2 and is 0.38
    nats/token off there).
    sync_every: the ct2 engine takes the trained weights every this many steps (1: after each
    optimizer step; k > 1 leaves the rollouts up to k - 1 steps stale, logged as
    `rollout_staleness`). bf16 None: on where the
    hardware computes it natively. stepwise_eval: the step-wise evaluation on `eval_tasks`
    before and after training: `stepwise_states` states of the seed stages drawn with `seed`
    from expert journals of those tasks (`stepwise_expert_steps` steps each, so that a
    shorter `expert_steps` leaves the evaluation's states as they are), one completion each
    at `stepwise_temperature` and `max_new_tokens`, generated by `engine` (auto: ct2 where it converts the model) at
    `quantization`. When `tasks` is a group (lite, all) the eval tasks are left out of it;
    ids given one by one must not overlap them. On a run that collects (--sft auto) the one
    before runs alongside the collection (mleforge.train.grpo). stepwise_after_sft: also
    evaluate the warm start's model on the same states (off on the cpu preset, where it costs
    2.5-4 of the job's minutes; on for gpu-1x). A config written before it existed reads as on
    (LEGACY). sft_episodes: template-expert episodes per
    task that --sft auto collects (their journals also seed the buffer); sft_max_length: its
    samples' token cap (SFTConfig.max_length); sft_loss_samples: the samples its loss before
    and after is measured on (SFTConfig.loss_samples; 4 on a CPU, where 32 took 9 of the
    warm start's 22 minutes: each sample costs a forward pass before and one after).
    """

    # What a run whose config was written before these settings existed ran with (read by
    # mleforge.train.grpo.load_run_config; the model's are ModelConfig.LEGACY).
    LEGACY: ClassVar[dict[str, Any]] = {"stepwise_after_sft": True}

    model: ModelConfig = field(default_factory=ModelConfig)
    tasks: str = "lite"
    eval_tasks: str = "penguins,breast-cancer"
    steps: int = 4
    group_size: int = 4
    groups_per_step: int = 1
    micro_batch: int | None = None
    max_new_tokens: int = 192
    temperature: float = 0.8
    top_p: float = 1.0
    lr: float = 5e-5
    lr_scheduler: str = "constant"
    beta: float = 0.0
    loss_type: str = "dapo"
    scale_rewards: str = "group"
    max_grad_norm: float = 1.0
    sampler: str = "learnability"
    buffer_growth: bool = True
    sft: str = "auto"
    sft_steps: int = 22
    sft_lr: float = 2e-4
    sft_batch_size: int = 1
    sft_grad_accum: int = 1
    sft_episodes: int = 1
    sft_max_length: int = 4096
    sft_loss_samples: int = 4
    journals: str | None = None
    expert_steps: int = 6
    seed_stages: tuple[str, ...] = ("debug", "improve")
    executor: str = "auto"
    isolation: str | None = None  # None: $MLEFORGE_ISOLATION, else auto (bwrap or a clear error)
    feedback: str = "public"  # the reward is the public score either way; none: prompts show no score
    exec_workers: int | None = None
    cache: bool = True
    run_timeout_s: float | None = 120.0
    save_steps: int = 1
    save_total_limit: int = 2
    generation: str = "auto"
    rollout_quantization: str | None = None
    sync_every: int = 1
    bf16: bool | None = None
    stepwise_eval: bool = True
    stepwise_after_sft: bool = False
    stepwise_states: int = 8
    stepwise_expert_steps: int = 6
    stepwise_temperature: float = 0.7
    engine: str = "auto"
    quantization: str | None = None
    seed: int = 0
    preset: str = "cpu"
    prompt: PromptConfig = field(default_factory=compact_prompt)
    reward: RewardConfig = field(default_factory=RewardConfig)
    buffer: BufferConfig = field(default_factory=BufferConfig)
    learnability: LearnabilityConfig = field(default_factory=LearnabilityConfig)

    def __post_init__(self) -> None:
        for name, cls in NESTED.items():
            value = getattr(self, name)
            if isinstance(value, dict):
                object.__setattr__(self, name, _nested_from_dict(cls, value))
        if not isinstance(self.tasks, str) or not self.tasks.strip():
            raise ConfigError("tasks: give lite, all, or comma-separated task ids")
        if not isinstance(self.eval_tasks, str):
            raise ConfigError("eval_tasks: give comma-separated task ids the run does not train on (or '')")
        _integer("steps", self.steps, 1)
        _integer("group_size", self.group_size, 2, "; GRPO compares the rollouts of one state, so a group "
                 "needs at least 2 (--group-size 4 on a CPU)")
        _integer("groups_per_step", self.groups_per_step, 1)
        # The LP's L is the chance that a group of G rollouts is not all tied: G is this run's group.
        if self.learnability.group_size != self.group_size:
            object.__setattr__(self, "learnability", replace(self.learnability, group_size=self.group_size))
        if self.micro_batch is None:
            object.__setattr__(self, "micro_batch", self.group_size)
        _integer("micro_batch", self.micro_batch, 1)
        if self.sequences_per_step % self.micro_batch:
            raise ConfigError(
                f"micro_batch: got {self.micro_batch}; a step's {self.groups_per_step} x {self.group_size} = "
                f"{self.sequences_per_step} sequences must split into whole micro-batches (use a divisor of "
                f"{self.sequences_per_step})"
            )
        _integer("max_new_tokens", self.max_new_tokens, 1)
        _number("temperature", self.temperature, low=0.0, strict=True, fix=" (GRPO samples; 0.8-1.0 is usual)")
        _number("top_p", self.top_p, low=0.0, strict=True)
        if self.top_p > 1:
            raise ConfigError(f"top_p: got {self.top_p}; expected a probability in (0, 1]")
        _number("lr", self.lr, low=0.0, strict=True, fix=" (1e-5 for LoRA, 1e-6 for full fine-tuning)")
        _choice("lr_scheduler", self.lr_scheduler, LR_SCHEDULERS)
        _number("beta", self.beta, low=0.0)
        _choice("loss_type", self.loss_type, LOSS_TYPES)
        _choice("scale_rewards", self.scale_rewards, SCALE_REWARDS)
        _number("max_grad_norm", self.max_grad_norm, low=0.0)
        _choice("sampler", self.sampler, SAMPLER_KINDS)
        _flag("buffer_growth", self.buffer_growth)
        if not isinstance(self.sft, str) or not self.sft.strip():
            raise ConfigError("sft: give auto, none, or the path of an `mleforge sft` checkpoint")
        _integer("sft_steps", self.sft_steps, 1)
        _number("sft_lr", self.sft_lr, low=0.0, strict=True, fix=" (2e-4 for the cpu preset's brief LoRA warm start)")
        _integer("sft_batch_size", self.sft_batch_size, 1)
        _integer("sft_grad_accum", self.sft_grad_accum, 1)
        _integer("sft_episodes", self.sft_episodes, 1)
        _integer("sft_max_length", self.sft_max_length, 16)
        _integer("sft_loss_samples", self.sft_loss_samples, 1)
        if self.journals is not None and (not isinstance(self.journals, str) or not self.journals):
            raise ConfigError("journals: give a folder of collected runs (their journal.json files), or null")
        _integer("expert_steps", self.expert_steps, 1)
        _integer("stepwise_expert_steps", self.stepwise_expert_steps, 1)
        object.__setattr__(self, "seed_stages", tuple(self.seed_stages))
        if not self.seed_stages:
            raise ConfigError("seed_stages: keep at least one stage of draft, debug, improve")
        for stage in self.seed_stages:
            _choice("seed_stages", stage, STAGES)
        _choice("executor", self.executor, EXECUTORS)
        _choice("feedback", self.feedback, ("public", "none"))
        if self.isolation is not None:
            _choice("isolation", self.isolation, ("auto", "bwrap", "none"))
        _integer("exec_workers", self.exec_workers, 1, optional=True)
        _flag("cache", self.cache)
        if self.run_timeout_s is not None:
            _number("run_timeout_s", self.run_timeout_s, low=0.0, strict=True)
        _integer("save_steps", self.save_steps, 1)
        _integer("save_total_limit", self.save_total_limit, 2, "; the newest checkpoint may be half-written "
                 "when a run is killed, so the one before it must survive")
        if self.save_steps > self.buffer.retain_evicted_steps:
            raise ConfigError(
                f"save_steps ({self.save_steps}) > buffer.retain_evicted_steps "
                f"({self.buffer.retain_evicted_steps}): a resume rewinds the buffer up to save_steps steps, "
                "further than it keeps evicted states; raise buffer.retain_evicted_steps or lower save_steps"
            )
        if not isinstance(self.generation, str) or not self.generation:
            raise ConfigError("generation: give auto, trl, vllm, or a registered engine's name")
        self._check_rollout_engine()
        _flag("bf16", self.bf16, optional=True)
        _flag("stepwise_eval", self.stepwise_eval)
        _flag("stepwise_after_sft", self.stepwise_after_sft)
        _integer("stepwise_states", self.stepwise_states, 1)
        _number("stepwise_temperature", self.stepwise_temperature, low=0.0, strict=True)
        _choice("engine", self.engine, ENGINE_CHOICES)
        if self.quantization is not None:
            _choice("quantization", self.quantization, QUANTIZATIONS)
            if self.engine == "transformers":
                raise ConfigError("quantization applies to the ct2 engine; drop it or use engine ct2 (or auto)")
        # The curriculum's success test of an improve run is "above the reward of no change".
        neutral = self.reward.neutral_reward
        if self.learnability.improve_neutral != neutral:
            object.__setattr__(self, "learnability", replace(self.learnability, improve_neutral=neutral))
        _integer("seed", self.seed, 0)
        _choice("preset", self.preset, PRESET_NAMES)

    def _check_rollout_engine(self) -> None:
        """rollout_quantization and sync_every set the ct2 rollouts; TRL's own and vLLM's
        generation take the weights every step themselves."""
        if self.rollout_quantization is not None:
            _choice("rollout_quantization", self.rollout_quantization, QUANTIZATIONS)
        _integer("sync_every", self.sync_every, 1, " (1: the rollout engine takes the weights after every step)")
        if self.generation in ("trl", "vllm") and (self.rollout_quantization is not None or self.sync_every != 1):
            raise ConfigError(f"rollout_quantization and sync_every apply to engine rollouts (generation ct2); "
                              f"generation {self.generation} samples from the training weights every step: drop "
                              "them or use --generation ct2")
        if self.save_steps % self.sync_every:
            # A resume starts from a checkpoint's weights; the rollouts after it repeat the
            # uninterrupted run's only if that run synced the engine at the checkpoint's step.
            raise ConfigError(f"save_steps ({self.save_steps}) must be a multiple of sync_every ({self.sync_every}), "
                              "so that a resumed run's rollouts sample from the weights the uninterrupted run's did")

    @property
    def sequences_per_step(self) -> int:
        return self.groups_per_step * self.group_size

    @property
    def sft_mode(self) -> str:
        """auto, none, or path."""
        return self.sft if self.sft in SFT_MODES else "path"

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["seed_stages"] = list(self.seed_stages)
        data["prompt"]["packages"] = list(self.prompt.packages)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrainConfig:
        _known(cls, data)
        return cls(**data)

    @classmethod
    def preset_config(cls, name: str = "cpu", **overrides: Any) -> TrainConfig:
        """The preset `name` with `overrides` on top; `model` overrides are a dict of
        ModelConfig fields, merged into the preset's."""
        if name not in PRESETS:
            raise ConfigError(f"preset: got {name!r}; expected one of {', '.join(PRESETS)}")
        base = dict(PRESETS[name])
        model = {**base.pop("model", {}), **(overrides.pop("model", None) or {})}
        merged = {**base, **overrides, "preset": name}
        return cls(model=ModelConfig(**model), **merged)

    def replace(self, **changes: Any) -> TrainConfig:
        return replace(self, **changes)


NESTED: dict[str, type] = {
    "model": ModelConfig, "prompt": PromptConfig, "reward": RewardConfig, "buffer": BufferConfig,
    "learnability": LearnabilityConfig,
}


def _nested_from_dict(cls: type, data: dict[str, Any]) -> Any:
    _known(cls, data)
    return cls(**data)


# The presets: overrides of TrainConfig's defaults (which are `cpu`). gpu-1x is one GPU of
# 24 GB or more: bf16, 8 states x 8 rollouts a step, completions long enough for a whole
# script, every stage seeded, the full prompt, vLLM generation where it is installed.
PRESETS: dict[str, dict[str, Any]] = {
    "cpu": {},
    "gpu-1x": {
        "model": {"dtype": "bfloat16", "device": "cuda", "gradient_checkpointing": True, "prompt_grad": True},
        "steps": 200,
        "group_size": 8,
        "groups_per_step": 8,
        "micro_batch": 8,
        "max_new_tokens": 1024,
        "lr": 5e-6,
        "sft_steps": 200,
        "sft_lr": 1e-4,
        "sft_batch_size": 4,
        "sft_grad_accum": 4,
        "sft_loss_samples": 32,
        "expert_steps": 12,
        "stepwise_expert_steps": 12,
        "seed_stages": ("draft", "debug", "improve"),
        "run_timeout_s": 600.0,
        "save_steps": 4,
        "save_total_limit": 3,
        "bf16": True,
        "stepwise_after_sft": True,
        "prompt": PromptConfig(),
    },
}
