"""What a training run does: one config tree, each component's settings in its own dataclass.

TrainConfig holds GRPO's own settings and the run's, and nests the components' configs:
model, collect (the --sft auto collection), sft (the warm start's fine-tuning), sandbox,
generation (the GRPO rollouts), stepwise (the evaluation before and after), reward, buffer,
learnability and prompt. The defaults are the `cpu` preset, the main job (`mleforge train` with
no arguments: the bundled Qwen2.5-Coder-0.5B with LoRA, on the lite tasks, on a CPU; what its
parts cost: `python benchmarks/train_step.py`); `gpu-1x` (`PRESETS`) overrides them for one GPU.
Values are checked here, without touching the file system; what depends on the machine
(extras, the model, the tasks) is checked by `mleforge.train.preflight`. Every field is a
flag (mleforge.config.add_arguments) and a key of a `--config` YAML file.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

from mleforge import config as check
from mleforge.agent.prompt_config import PromptConfig
from mleforge.curriculum.config import BufferConfig, LearnabilityConfig, SamplerConfig
from mleforge.errors import ConfigError
from mleforge.eval.stepwise_config import StepwiseConfig
from mleforge.expert.collect_config import CollectConfig
from mleforge.policies.engines.base import QUANTIZATIONS
from mleforge.reward import RewardConfig
from mleforge.sandbox.config import SandboxConfig
from mleforge.train.grpo.advantages import INVALID_GROUPS
from mleforge.train.prompt_renderer import compact_prompt
from mleforge.train.tracking import TRACKERS

DTYPES = ("auto", "float32", "bfloat16", "float16")
DEVICES = ("auto", "cpu", "cuda")
STAGES = ("draft", "debug", "improve")
# TRL 1.16's GRPOConfig.loss_type and scale_rewards values.
LOSS_TYPES = ("grpo", "dr_grpo", "dapo", "bnpo", "cispo", "sapo", "luspo", "vespo")
SCALE_REWARDS = ("group", "batch", "none")
LR_SCHEDULERS = ("constant", "constant_with_warmup", "linear", "cosine")
PRESET_NAMES = ("cpu", "gpu-1x")
WARM_STARTS = ("auto", "none")  # or the path of an `mleforge sft` checkpoint
FEEDBACKS = ("public", "none")
REPORT_TO = TRACKERS
REPORT_TO_HELP = ("where the curves go besides metrics.jsonl: tensorboard (<run>/tensorboard; pip install "
                  "'mleforge[tracking]') | wandb | trackio | none")


class _Tree:
    """to_dict/from_dict of a config dataclass through mleforge.config."""

    def to_dict(self) -> dict[str, Any]:
        return check.to_dict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Any:
        return check.from_dict(cls, data)


@dataclass(frozen=True)
class ModelConfig(_Tree):
    """The model to train and how. LoRA rank 16, alpha 2 x rank, on every linear layer, is the
    usual setting. gradient_checkpointing trades a recompute for activations: off on a CPU's
    one-sequence micro-batches, on for gpu-1x's larger ones. lora_layers and prompt_grad shorten
    the backward pass (`python benchmarks/lora_layers.py` measures both); prompt_grad off leaves
    out the gradient's path through the prompt's keys and values, on is the exact gradient."""

    # What a run whose config was written before these settings existed ran with.
    LEGACY: ClassVar[dict[str, Any]] = {"prompt_grad": True}

    spec: str = field(default="bundled:qwen2.5-coder-0.5b", metadata={
        "aliases": ("--model",), "help": "bundled:NAME | hf:PATH (a transformers folder, or a checkpoint of "
                                         "`mleforge sft`/`train`: an adapter that names its base)"})
    full: bool = field(default=False, metadata={
        "aliases": ("--full",), "help": "train every weight instead of a LoRA adapter"})
    lora_rank: int = field(default=16, metadata={"aliases": ("--lora-rank",), "help": "LoRA rank"})
    lora_alpha: float | None = field(default=None, metadata={"help": "LoRA alpha (none: 2 x rank)"})
    lora_dropout: float = field(default=0.0, metadata={"help": "LoRA dropout"})
    target_modules: str = field(default="all-linear", metadata={
        "help": "'all-linear' or comma-separated module names the adapter goes on"})
    dtype: str = field(default="auto", metadata={
        "choices": DTYPES, "help": "weights' type (auto: bfloat16 on a GPU that has it, float32 on a CPU)"})
    device: str = field(default="auto", metadata={"choices": DEVICES, "help": "where the model trains"})
    gradient_checkpointing: bool = field(default=False, metadata={
        "help": "recompute the forward pass in the backward one (less memory, slower)"})
    threads: int | None = field(default=None, metadata={
        "aliases": ("--threads",), "help": "torch CPU threads (none: torch's default)"})
    lora_layers: int | None = field(default=None, metadata={
        "aliases": ("--lora-layers",), "none": "all",
        "help": "put the adapter on the last N decoder layers only (a shorter backward pass), or on all"})
    prompt_grad: bool = field(default=False, metadata={
        "aliases": ("--prompt-grad",),
        "help": "on: the exact gradient; off: the prompt but its last token runs without a graph, so the "
                "backward pass covers the completion only (the same loss). gpu-1x: on (activation "
                "checkpointing needs it on)"})

    def __post_init__(self) -> None:
        check.text("model.spec", self.spec, "name a model, as in bundled:qwen2.5-coder-0.5b or hf:./checkpoint")
        check.flag("model.full", self.full)
        check.integer("model.lora_rank", self.lora_rank, 1, " (--lora-rank 16 is usual)")
        check.number("model.lora_alpha", self.lora_alpha, low=0.0, strict=True, optional=True)
        check.probability("model.lora_dropout", self.lora_dropout, below_one=True)
        check.text("model.target_modules", self.target_modules, "give 'all-linear' or comma-separated module names")
        check.choice("model.dtype", self.dtype, DTYPES)
        check.choice("model.device", self.device, DEVICES)
        check.flag("model.gradient_checkpointing", self.gradient_checkpointing)
        check.integer("model.threads", self.threads, 1, optional=True)
        check.integer("model.lora_layers", self.lora_layers, 1, " (or leave it out: every layer)", optional=True)
        check.flag("model.prompt_grad", self.prompt_grad)
        if not self.prompt_grad and self.gradient_checkpointing:
            raise ConfigError("model.prompt_grad off runs the prompt without a graph through a key/value cache, "
                              "which activation checkpointing turns off: turn gradient_checkpointing off, or "
                              "prompt_grad on")

    @property
    def alpha(self) -> float:
        return float(self.lora_alpha) if self.lora_alpha is not None else 2.0 * self.lora_rank


@dataclass(frozen=True)
class SFTConfig(_Tree):
    """Fine-tuning on expert samples (ML-Agent's exploration-enriched SFT): the settings of
    `mleforge sft` and of `mleforge train`'s warm start. max_length caps prompt + completion
    tokens: a longer sample is left out (and counted), never cut, since a cut completion teaches
    a broken action. loss_samples: the seeded subset the completion loss before and after is
    measured on (a forward pass each, twice)."""

    epochs: float = field(default=2.0, metadata={"help": "passes over the samples"})
    max_steps: int | None = field(default=None, metadata={
        "help": "stop after this many optimizer steps (overrides epochs)"})
    lr: float = field(default=1e-4, metadata={"help": "learning rate (1e-4 for LoRA, 2e-5 for full fine-tuning)"})
    batch_size: int = field(default=2, metadata={"help": "samples per forward pass"})
    grad_accum: int = field(default=4, metadata={"help": "forward passes per optimizer step"})
    max_length: int = field(default=4096, metadata={
        "help": "prompt + completion tokens; longer samples are left out"})
    save_steps: int = field(default=50, metadata={"help": "a checkpoint every this many steps"})
    bf16: bool | None = field(default=None, metadata={"help": "bfloat16 (none: where the hardware computes it)"})
    loss_samples: int = field(default=32, metadata={"help": "samples the loss before and after is measured on"})

    def __post_init__(self) -> None:
        check.number("sft.epochs", self.epochs, low=0.0, strict=True)
        check.integer("sft.max_steps", self.max_steps, 1, optional=True)
        check.number("sft.lr", self.lr, low=0.0, strict=True, fix=" (1e-4 for LoRA, 2e-5 for full fine-tuning)")
        check.integer("sft.batch_size", self.batch_size, 1)
        check.integer("sft.grad_accum", self.grad_accum, 1)
        check.integer("sft.max_length", self.max_length, 16)
        check.integer("sft.save_steps", self.save_steps, 1)
        check.flag("sft.bf16", self.bf16, optional=True)
        check.integer("sft.loss_samples", self.loss_samples, 1)


# `mleforge sft`'s own names for the fine-tuning settings.
SFT_FLAGS = {name: (f"--{name.replace('_', '-')}",) for name in
             ("epochs", "max_steps", "lr", "batch_size", "grad_accum", "max_length", "save_steps", "bf16",
              "loss_samples")}


@dataclass(frozen=True)
class SFTRunConfig(_Tree):
    """`mleforge sft`: fine-tune `model` on the `samples` into the run directory `out`."""

    samples: str = field(default="", metadata={
        "help": "a samples JSONL file, or a folder of them (what `mleforge collect` writes)"})
    out: str = field(default="", metadata={
        "help": "run directory (none given: runs/sft/<model>; the same command again resumes it)"})
    model: ModelConfig = field(default_factory=ModelConfig)
    stages: tuple[str, ...] | None = field(default=None, metadata={
        "help": "train only on these stages (comma-separated: draft,debug,improve; none: all)"})
    seed: int = field(default=0, metadata={"help": "seed of the samples' order and the loss subset"})
    sft: SFTConfig = field(default_factory=SFTConfig, metadata={"aliases": SFT_FLAGS})
    report_to: str = field(default="none", metadata={"choices": REPORT_TO, "help": REPORT_TO_HELP})

    def __post_init__(self) -> None:
        check.build_sections(self)
        check.choice("report_to", self.report_to, REPORT_TO)
        check.text("sft.samples", self.samples, "give the samples' JSONL file (or a folder of them), as "
                                                "`mleforge collect` writes")
        check.text("sft.out", self.out, "give the run directory to write")
        if self.stages is not None:
            object.__setattr__(self, "stages", tuple(self.stages))
            for stage in self.stages:
                check.choice("sft.stages", stage, STAGES)
        check.integer("sft.seed", self.seed, 0)


def warm_start_sft() -> SFTConfig:
    """The cpu preset's warm start: 22 single-sample steps at 2e-4, its loss on 4 samples."""
    return SFTConfig(max_steps=22, lr=2e-4, batch_size=1, grad_accum=1, loss_samples=4)


def warm_start_collect() -> CollectConfig:
    """The --sft auto collection: one template-expert episode of 6 steps a task. Its tasks,
    first_seed, executor, isolation and prompt are the run's (mleforge.train.warm_start.collect_config)."""
    return CollectConfig(teacher="template", episodes=1, steps=6, embedder="tfidf")


@dataclass(frozen=True)
class GenerationConfig(_Tree):
    """What samples the GRPO rollouts (mleforge.train.grpo.generation). rollout_quantization and
    sync_every set engine rollouts (ct2, mleforge.train.grpo.ct2_rollout); TRL's own and vLLM's
    generation sample from the training weights every step themselves."""

    backend: str = field(default="auto", metadata={
        "aliases": ("--generation",),
        "help": "trl (TRL's own generate) | vllm (TRL's, on a GPU) | ct2 (CTranslate2, the trained weights "
                "synced, a group's prompt prefilled once; pip install 'mleforge[fast]') | a registered "
                "engine | auto (ct2 on a CPU where it converts the model, vllm on a GPU where installed, else trl)"})
    rollout_quantization: str | None = field(default=None, metadata={
        "choices": QUANTIZATIONS, "aliases": ("--rollout-quantization",),
        "help": "the ct2 rollouts' weight type (none: the training weights' own; TRL corrects for other "
                "weights' samples only on its vLLM path, so a quantized engine is faster but biased)"})
    sync_every: int = field(default=1, metadata={
        "aliases": ("--sync-every",),
        "help": "the engine takes the trained weights every this many steps (staleness is logged)"})

    def __post_init__(self) -> None:
        check.text("generation.backend", self.backend, "give auto, trl, vllm, or a registered engine's name")
        check.choice("generation.rollout_quantization", self.rollout_quantization, QUANTIZATIONS, optional=True)
        check.integer("generation.sync_every", self.sync_every, 1,
                      " (1: the rollout engine takes the weights after every step)")
        if self.backend in ("trl", "vllm") and (self.rollout_quantization is not None or self.sync_every != 1):
            raise ConfigError(f"rollout_quantization and sync_every apply to engine rollouts (generation ct2); "
                              f"generation {self.backend} samples from the training weights every step: drop "
                              "them or use --generation ct2")


SECTIONS: dict[str, type] = {
    "model": ModelConfig, "collect": CollectConfig, "sft": SFTConfig, "sandbox": SandboxConfig,
    "generation": GenerationConfig, "stepwise": StepwiseConfig, "reward": RewardConfig, "buffer": BufferConfig,
    "learnability": LearnabilityConfig, "prompt": PromptConfig, "sampler": SamplerConfig,
}


@dataclass(frozen=True)
class TrainConfig(_Tree):
    """`mleforge train`: step-wise GRPO on states from the evolving buffer.

    A step draws `groups_per_step` states (by `sampler`) and samples `group_size` completions
    of each; the reward executes every one. `micro_batch` sequences go through one
    forward/backward pass (none: one group's, so that on a device without Triton a group's
    shared prompt goes through the model once; mleforge.train.grpo.trainer). warm_start: "auto"
    collects expert samples (`collect`) and fine-tunes briefly (`sft`) first, ML-Agent's SFT
    before RL; "none" starts from `model`; a path starts from that `mleforge sft` checkpoint.
    journals: a folder of collected runs whose journals seed the buffer (none: the template
    expert makes them, `collect.steps` steps a task). save_steps: a resume replays at most that
    many steps, so the buffer keeps evicted rows as long (buffer.retain_evicted_steps).
    """

    model: ModelConfig = field(default_factory=ModelConfig)
    tasks: str = field(default="lite", metadata={"help": "tasks to train on: lite | all | id,id,..."})
    eval_tasks: str = field(default="diabetes,telco-churn", metadata={
        "help": "tasks of the step-wise evaluation, not trained on ('' for none; left out of a group in tasks); "
                "tasks whose expert states leave headroom (the template expert scores a perfect 1.0 on penguins "
                "and breast-cancer, so their states can show no improvement)"})
    steps: int = field(default=4, metadata={"help": "GRPO steps"})
    group_size: int = field(default=4, metadata={"help": "rollouts per state (GRPO's G; at least 2)"})
    groups_per_step: int = field(default=1, metadata={
        "help": "states per step, each step one optimizer step on all its groups' rollouts (gradient "
                "accumulation over micro-batches); at equal rollouts (steps x groups_per_step), 1 takes "
                "more, noisier steps than 4"})
    micro_batch: int | None = field(default=None, metadata={
        "help": "sequences per forward/backward pass (none: one group's)"})
    max_new_tokens: int = field(default=192, metadata={"help": "completion length cap"})
    temperature: float = field(default=0.8, metadata={"help": "sampling temperature of the GRPO rollouts"})
    top_p: float = field(default=1.0, metadata={"help": "nucleus sampling of the GRPO rollouts"})
    lr: float = field(default=5e-5, metadata={"help": "learning rate"})
    lr_scheduler: str = field(default="constant", metadata={"choices": LR_SCHEDULERS, "help": "learning-rate schedule"})
    warmup: float = field(default=0.0, metadata={
        "help": "linear warm-up of the learning rate from 0: N steps (a whole number >= 1) or a fraction of "
                "the run's steps (in [0, 1)); needs an lr_scheduler with warm-up (constant_with_warmup, "
                "linear, cosine)"})
    beta: float = field(default=0.0, metadata={
        "help": "KL coefficient against the start (0: none). Under LoRA the reference is the model with the "
                "adapter off, i.e. the warm start (merged into the base): one more forward pass per step, "
                "without gradient, and no memory; full fine-tuning keeps a second copy of the model"})
    loss_type: str = field(default="dapo", metadata={"choices": LOSS_TYPES, "help": "TRL's GRPO loss"})
    scale_rewards: str = field(default="group", metadata={
        "choices": SCALE_REWARDS, "help": "TRL's advantage scaling: group ((r - group mean) / group std), "
                                          "batch (/ the step's std), none (r - group mean, Dr. GRPO)"})
    invalid_groups: str = field(default="standardize", metadata={
        "choices": INVALID_GROUPS, "help": "a group with no valid rollout (its failures' small reward gaps): "
                                           "standardize (scaled as any group), zero (no advantage), raw "
                                           "(r - group mean, unscaled); mleforge.train.grpo.advantages"})
    shuffle_rewards: bool = field(default=False, metadata={
        "help": "a null control: each group's rewards are permuted (seeded) before the advantages, so the "
                "updates keep GRPO's size and carry no signal; the rollouts keep their own rewards"})
    max_grad_norm: float = field(default=1.0, metadata={"help": "gradient clipping"})
    buffer_growth: bool = field(default=True, metadata={
        "negative": "--no-buffer-growth",
        "help": "rollouts add new states to the buffer (off, an ablation: the buffer stays its seeds)"})
    warm_start: str = field(default="auto", metadata={
        "aliases": ("--sft",), "help": "auto (collect with the template expert, fine-tune briefly) | none | "
                                       "PATH (an `mleforge sft` run or its model/)"})
    journals: str | None = field(default=None, metadata={
        "help": "a folder of collected runs whose journals seed the buffer (none: the template expert makes them)"})
    seed_stages: tuple[str, ...] = field(default=("debug", "improve"), metadata={
        "help": "the journal states kept as seeds (and the warm start's samples)"})
    feedback: str = field(default="public", metadata={
        "choices": FEEDBACKS, "help": "what the states' prompts show of earlier runs: public (the public score) "
                                      "or none (execution output only); the reward is the public score either way"})
    save_steps: int = field(default=1, metadata={"help": "a checkpoint every this many steps"})
    save_total_limit: int = field(default=2, metadata={"help": "checkpoints kept (at least 2)"})
    bf16: bool | None = field(default=None, metadata={"help": "bfloat16 (none: where the hardware computes it)"})
    seed: int = field(default=0, metadata={"help": "seed of every random choice"})
    report_to: str = field(default="none", metadata={"choices": REPORT_TO, "help": REPORT_TO_HELP})
    preset: str = field(default="cpu", metadata={
        "choices": PRESET_NAMES, "help": "cpu (bundled Qwen-0.5B, LoRA, lite tasks, short edit-block steps) | "
                                         "gpu-1x (bf16, 8 x 8 rollouts a step, 1,024-token completions)"})
    collect: CollectConfig = field(default_factory=warm_start_collect, metadata={
        "aliases": {"episodes": ("--sft-episodes",), "steps": ("--expert-steps",)}})
    sft: SFTConfig = field(default_factory=warm_start_sft, metadata={
        "aliases": {"max_steps": ("--sft-steps",), "lr": ("--sft-lr",), "max_length": ("--sft-max-length",),
                    "loss_samples": ("--sft-loss-samples",)}})
    sandbox: SandboxConfig = field(default_factory=SandboxConfig)
    generation: GenerationConfig = field(default_factory=GenerationConfig)
    stepwise: StepwiseConfig = field(default_factory=StepwiseConfig)
    prompt: PromptConfig = field(default_factory=compact_prompt)
    reward: RewardConfig = field(default_factory=RewardConfig)
    buffer: BufferConfig = field(default_factory=BufferConfig)
    learnability: LearnabilityConfig = field(default_factory=LearnabilityConfig)
    sampler: SamplerConfig = field(default_factory=SamplerConfig, metadata={"aliases": {"kind": ("--sampler",)}})

    def __post_init__(self) -> None:
        if isinstance(self.sampler, str):  # TrainConfig(sampler="uniform"): the sampler's kind
            object.__setattr__(self, "sampler", {"kind": self.sampler})
        check.build_sections(self)
        self._check_run()
        self._check_batches()
        self._check_grpo()
        self._link_sections()

    def _check_run(self) -> None:
        check.text("tasks", self.tasks, "give lite, all, or comma-separated task ids")
        if not isinstance(self.eval_tasks, str):
            raise ConfigError("eval_tasks: give comma-separated task ids the run does not train on (or '')")
        check.text("warm_start", self.warm_start, "give auto, none, or the path of an `mleforge sft` checkpoint")
        check.text("journals", self.journals, "give a folder of collected runs (their journal.json files), or null",
                   optional=True)
        object.__setattr__(self, "seed_stages", tuple(self.seed_stages))
        if not self.seed_stages:
            raise ConfigError("seed_stages: keep at least one stage of draft, debug, improve")
        for stage in self.seed_stages:
            check.choice("seed_stages", stage, STAGES)
        check.choice("feedback", self.feedback, FEEDBACKS)
        check.integer("seed", self.seed, 0)
        check.choice("report_to", self.report_to, REPORT_TO)
        check.choice("preset", self.preset, PRESET_NAMES)

    def _check_batches(self) -> None:
        check.integer("steps", self.steps, 1)
        check.integer("group_size", self.group_size, 2, "; GRPO compares the rollouts of one state, so a group "
                      "needs at least 2 (--group-size 4 on a CPU)")
        check.integer("groups_per_step", self.groups_per_step, 1)
        if self.micro_batch is None:
            object.__setattr__(self, "micro_batch", self.group_size)
        check.integer("micro_batch", self.micro_batch, 1)
        if self.sequences_per_step % self.micro_batch:
            raise ConfigError(
                f"micro_batch: got {self.micro_batch}; a step's {self.groups_per_step} x {self.group_size} = "
                f"{self.sequences_per_step} sequences must split into whole micro-batches (use a divisor of "
                f"{self.sequences_per_step})"
            )

    def _check_grpo(self) -> None:
        check.integer("max_new_tokens", self.max_new_tokens, 1)
        check.number("temperature", self.temperature, low=0.0, strict=True, fix=" (GRPO samples; 0.8-1.0 is usual)")
        check.probability("top_p", self.top_p, above_zero=True)
        check.number("lr", self.lr, low=0.0, strict=True, fix=" (1e-5 for LoRA, 1e-6 for full fine-tuning)")
        check.choice("lr_scheduler", self.lr_scheduler, LR_SCHEDULERS)
        self._check_warmup()
        check.number("beta", self.beta, low=0.0)
        check.choice("loss_type", self.loss_type, LOSS_TYPES)
        check.choice("scale_rewards", self.scale_rewards, SCALE_REWARDS)
        check.choice("invalid_groups", self.invalid_groups, INVALID_GROUPS)
        check.flag("shuffle_rewards", self.shuffle_rewards)
        check.number("max_grad_norm", self.max_grad_norm, low=0.0)
        check.flag("buffer_growth", self.buffer_growth)
        check.integer("save_steps", self.save_steps, 1)
        check.integer("save_total_limit", self.save_total_limit, 2, "; the newest checkpoint may be half-written "
                      "when a run is killed, so the one before it must survive")
        check.flag("bf16", self.bf16, optional=True)

    def _check_warmup(self) -> None:
        check.number("warmup", self.warmup, low=0.0, fix=" (steps, or a fraction of the run's steps)")
        if self.warmup >= 1 and self.warmup != int(self.warmup):
            raise ConfigError(f"warmup: got {self.warmup}; give whole steps (>= 1) or a fraction of the run's "
                              "steps (in [0, 1))")
        if self.warmup >= 1 and self.warmup > self.steps:
            raise ConfigError(f"warmup: {int(self.warmup)} steps in a run of {self.steps}: the learning rate would "
                              "never reach lr; give at most --steps, or a fraction")
        if self.warmup and self.lr_scheduler == "constant":
            raise ConfigError("warmup: lr_scheduler constant has no warm-up (TRL ignores it); use --lr-scheduler "
                              "constant_with_warmup (or linear, cosine), or warmup 0")

    def _link_sections(self) -> None:
        """What one section's setting means for another's."""
        # The warm start's collection runs on the run's own tasks, seed, sandbox and prompt.
        owned = {"tasks": "--tasks", "first_seed": "--seed", "executor": "--sandbox.executor",
                 "isolation": "--sandbox.isolation", "prompt_profile": "--prompt.profile",
                 "code_chars": "--prompt.code-chars"}
        default = warm_start_collect()
        for key, flag in owned.items():
            if getattr(self.collect, key) != getattr(default, key):
                raise ConfigError(f"collect.{key}: the warm start collects with the run's own setting; set {flag} "
                                  f"instead (got {getattr(self.collect, key)!r})")
        # The LP's L is the chance that a group of G rollouts is not all tied: G is this run's group,
        # and the sampler repeats each state G times in a row, drawn with the run's seed.
        if self.learnability.group_size != self.group_size:
            object.__setattr__(self, "learnability", replace(self.learnability, group_size=self.group_size))
        if (self.sampler.group_size, self.sampler.seed) != (self.group_size, self.seed):
            object.__setattr__(self, "sampler", replace(self.sampler, group_size=self.group_size, seed=self.seed))
        # The curriculum's success test of an improve run is "above the reward of no change".
        neutral = self.reward.neutral_reward
        if self.learnability.improve_neutral != neutral:
            object.__setattr__(self, "learnability", replace(self.learnability, improve_neutral=neutral))
        if self.save_steps > self.buffer.retain_evicted_steps:
            raise ConfigError(
                f"save_steps ({self.save_steps}) > buffer.retain_evicted_steps "
                f"({self.buffer.retain_evicted_steps}): a resume rewinds the buffer up to save_steps steps, "
                "further than it keeps evicted states; raise buffer.retain_evicted_steps or lower save_steps"
            )
        if self.save_steps % self.generation.sync_every:
            # A resume starts from a checkpoint's weights; the rollouts after it repeat the
            # uninterrupted run's only if that run synced the engine at the checkpoint's step.
            raise ConfigError(f"save_steps ({self.save_steps}) must be a multiple of generation.sync_every "
                              f"({self.generation.sync_every}), so that a resumed run's rollouts sample from the "
                              "weights the uninterrupted run's did")

    @property
    def sequences_per_step(self) -> int:
        return self.groups_per_step * self.group_size

    @property
    def warm_start_mode(self) -> str:
        """auto, none, or path."""
        return self.warm_start if self.warm_start in WARM_STARTS else "path"

    @classmethod
    def preset_config(cls, name: str = "cpu", **overrides: Any) -> TrainConfig:
        """The preset `name` with `overrides` on top: a section's overrides are a dict of its
        fields, merged into the preset's."""
        if name not in PRESETS:
            raise ConfigError(f"preset: got {name!r}; expected one of {', '.join(PRESETS)}")
        return cls.from_dict(check.merge(check.merge(PRESETS[name], overrides), {"preset": name}))

    def replace(self, **changes: Any) -> TrainConfig:
        """A copy with `changes`; a dict for a section changes those of its fields."""
        merged = {k: replace(getattr(self, k), **v) if k in SECTIONS and isinstance(v, dict) else v
                  for k, v in changes.items()}
        return replace(self, **merged)


# The presets: overrides of TrainConfig's defaults (which are `cpu`), over the same tree.
# gpu-1x is one GPU of 24 GB or more: bf16, 8 states x 8 rollouts a step, completions long
# enough for a whole script, every stage seeded, the full prompt, vLLM generation where installed.
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
        "sft": {"max_steps": 200, "lr": 1e-4, "batch_size": 4, "grad_accum": 4, "loss_samples": 32},
        "collect": {"steps": 12},
        "stepwise": {"expert_steps": 12, "states": 16, "samples": 4},
        "seed_stages": ["draft", "debug", "improve"],
        "sandbox": {"run_timeout_s": 600.0},
        "save_steps": 4,
        "save_total_limit": 3,
        "bf16": True,
        "prompt": check.to_dict(PromptConfig()),
    },
}


# --- configs written before the tree: read and mapped here, once ------------------------------

# A flat TrainConfig key -> its path in the tree.
FLAT_KEYS: dict[str, str] = {
    "sft": "warm_start",
    "sft_steps": "sft.max_steps", "sft_lr": "sft.lr", "sft_batch_size": "sft.batch_size",
    "sft_grad_accum": "sft.grad_accum", "sft_max_length": "sft.max_length", "sft_loss_samples": "sft.loss_samples",
    "sft_episodes": "collect.episodes", "expert_steps": "collect.steps",
    "executor": "sandbox.executor", "isolation": "sandbox.isolation", "exec_workers": "sandbox.exec_workers",
    "cache": "sandbox.cache", "run_timeout_s": "sandbox.run_timeout_s",
    "generation": "generation.backend", "rollout_quantization": "generation.rollout_quantization",
    "sync_every": "generation.sync_every",
    "stepwise_eval": "stepwise.enabled", "stepwise_after_sft": "stepwise.after_sft",
    "stepwise_states": "stepwise.states", "stepwise_expert_steps": "stepwise.expert_steps",
    "stepwise_temperature": "stepwise.temperature", "engine": "stepwise.engine",
    "quantization": "stepwise.quantization",
}
# What a flat config written before a setting existed ran with (a missing key reads so).
FLAT_LEGACY: dict[str, Any] = {"stepwise_after_sft": True}
# A flat SFTConfig (`mleforge sft`'s config.yaml before the tree): the keys that move under sft.
FLAT_SFT_KEYS = ("epochs", "max_steps", "lr", "batch_size", "grad_accum", "max_length", "save_steps", "bf16",
                 "loss_samples")


def is_flat_train_config(data: dict[str, Any]) -> bool:
    """A config.yaml written before the tree: its `sft` is the warm start's source, or it has a flat key."""
    return (isinstance(data.get("sft"), str) or isinstance(data.get("generation"), str)
            or any(key in data for key in FLAT_KEYS if key not in SECTIONS))


def upgrade_train_dict(data: dict[str, Any], *, legacy: bool = True) -> dict[str, Any]:
    """A TrainConfig dict in the tree's shape: a flat one's keys mapped by FLAT_KEYS. `legacy`
    (a config a run saved): a key its version did not write yet reads as what that run did
    (FLAT_LEGACY, ModelConfig.LEGACY, StepwiseConfig.LEGACY); a file a user writes (not legacy)
    leaves missing keys to the defaults."""
    if not isinstance(data, dict):
        return data
    out = dict(data)
    if is_flat_train_config(data):
        given = {**FLAT_LEGACY, **data} if legacy else data
        out = {k: v for k, v in given.items() if k not in FLAT_KEYS}
        for key, value in given.items():
            if key in FLAT_KEYS:
                out = check.set_dotted(out, FLAT_KEYS[key], value)
    if isinstance(out.get("sampler"), str):  # before the sampler's section: its kind
        out["sampler"] = {"kind": out["sampler"]}
    if legacy and isinstance(out.get("model"), dict):
        out["model"] = {**ModelConfig.LEGACY, **out["model"]}
    if legacy and isinstance(out.get("stepwise"), dict):
        out["stepwise"] = {**StepwiseConfig.LEGACY, **out["stepwise"]}
    return out


def upgrade_sft_run_dict(data: dict[str, Any], *, legacy: bool = True) -> dict[str, Any]:
    """An `mleforge sft` config dict in SFTRunConfig's shape: a flat one's fine-tuning keys
    moved under `sft`. `legacy` (a config a run saved): settings added since read as their
    defaults, the model's as ModelConfig.LEGACY (prompt_grad on, as it ran)."""
    if not isinstance(data, dict):
        return data
    out = dict(data)
    if not isinstance(data.get("sft"), dict):
        out = {k: v for k, v in data.items() if k not in FLAT_SFT_KEYS}
        out["sft"] = {k: data[k] for k in FLAT_SFT_KEYS if k in data}
    if not legacy:
        return out
    defaults = SFTRunConfig(samples="-", out="-").to_dict()
    defaults["model"] = {**defaults["model"], **ModelConfig.LEGACY}
    return check.merge({k: v for k, v in defaults.items() if k not in ("samples", "out")}, out)
