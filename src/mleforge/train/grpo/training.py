"""The GRPO trainer of a run, built: TRL's GRPOConfig from the run's config, the
CurriculumGRPOTrainer with its state feed and executing reward, and the callbacks that feed
each step back to the buffer, complete each checkpoint and draw the progress bar."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console

from mleforge.runs import CHECKPOINTS_DIR, FROZEN_DIR
from mleforge.train.checkpoint_marks import checkpoint_callback
from mleforge.train.plan import Plan, run_record
from mleforge.train.ranks import Ranks
from mleforge.utils.quiet import quiet_libraries

if TYPE_CHECKING:
    from mleforge.curriculum.buffer import StateBuffer
    from mleforge.sandbox import Executor
    from mleforge.train.config import TrainConfig
    from mleforge.train.grpo.executing_reward import ExecutingReward
    from mleforge.train.grpo.generation import RolloutFunc
    from mleforge.train.grpo.state_feed import CurriculumFeed
    from mleforge.train.grpo.trainer import CurriculumGRPOTrainer
    from mleforge.train.prompt_renderer import Renderer


@dataclass
class Training:
    """A run's trainer and the parts attached to it."""

    trainer: CurriculumGRPOTrainer
    reward: ExecutingReward
    feed: CurriculumFeed
    progress: Any  # the progress bar's TrainerCallback (mleforge.train.progress)
    full: bool
    base_spec: str
    rollout: RolloutFunc | None = None  # the engine's rollout_func (generation ct2 ...); None for TRL's own

    def close(self) -> None:
        from mleforge.train.grpo.generation import close_rollout

        # Each part is closed whatever the one before raised: the rollout engine's scratch
        # weights (gigabytes under <run>/ct2-rollouts/) must go even when the reward's close fails.
        try:
            self.progress.close()
        finally:
            try:
                self.reward.close()
            finally:
                close_rollout(self.rollout)


def build_trainer(plan: Plan, folder: Path, spec: str, buffer: StateBuffer, executor: Executor,
                  ranks: Ranks | None = None, *, renderer: Renderer | None = None, progress: bool = True,
                  console: Console | None = None) -> Training:
    """The CurriculumGRPOTrainer of a run, with its reward, feed and callbacks attached (on
    this rank of `ranks`: one process by default)."""
    from datasets import Dataset
    from transformers import PrinterCallback, ProgressCallback

    from mleforge.curriculum.sampler import make_sampler
    from mleforge.train.grpo.buffer_callback import FeedbackCallback
    from mleforge.train.grpo.executing_reward import ExecutingReward, execution_workers
    from mleforge.train.grpo.generation import rollout_func_for
    from mleforge.train.grpo.state_feed import CurriculumFeed, placeholder_rows
    from mleforge.train.grpo.trainer import CurriculumGRPOTrainer
    from mleforge.train.model import load_for_training
    from mleforge.train.progress import progress_callback
    from mleforge.train.prompt_renderer import make_renderer
    from mleforge.train.tracking import attach

    config = plan.config
    ranks = ranks or Ranks()
    # One process: its weights on a file (mleforge.train.model). Not between processes, whose
    # start-up broadcast of every weight writes them on the ranks that receive it.
    scratch = folder / FROZEN_DIR if ranks.count == 1 else None
    loaded = load_for_training(replace(config.model, spec=spec), scratch=scratch)
    loaded.tokenizer.padding_side = "left"  # TRL generates from left-padded prompts
    tasks = {t.id: t for t in plan.tasks}
    sampler = make_sampler(config.sampler, config.learnability)
    feed = CurriculumFeed(buffer, sampler, tasks, renderer or make_renderer(config.prompt), config.groups_per_step)
    reward = ExecutingReward(tasks, executor, feed.states, reward=config.reward, timeout_s=config.sandbox.run_timeout_s,
                             feedback=config.feedback,
                             max_workers=execution_workers(config, plan.tasks, share=ranks.local), rank=ranks.index)
    rollout = rollout_func_for(config.generation.backend, config, loaded.tokenizer)
    with quiet_libraries():  # TRL's and transformers' warnings about their own APIs
        trainer = CurriculumGRPOTrainer(
            model=loaded.model, reward_funcs=[reward], args=grpo_args(plan, folder, loaded.device),
            train_dataset=Dataset.from_list(placeholder_rows(config.groups_per_step)),
            processing_class=loaded.tokenizer, peft_config=loaded.peft_config, rollout_func=rollout,
            feed=feed, run_seed=config.seed, prompt_grad=config.model.prompt_grad,
            invalid_groups=config.invalid_groups, valid_from=config.reward.lowest_valid_reward,
            shuffle_rewards=config.shuffle_rewards,
        )
    for printer in (PrinterCallback, ProgressCallback):  # our own bar and metrics.jsonl instead
        trainer.remove_callback(printer)
    attach(trainer, folder)
    bar = progress_callback(f"train {spec}", enabled=progress, console=console)
    record = run_record(plan, "running")
    for callback in (
        bar,
        FeedbackCallback(trainer=trainer, buffer=buffer, feed=feed, reward=reward, run_dir=folder,
                         grow=config.buffer_growth, progress=bar),
        checkpoint_callback(full=loaded.full, base_spec=loaded.base_spec, run_record=record,
                            state=lambda s: {"buffer_step": s.global_step - 1}),
    ):
        trainer.add_callback(callback)

    return Training(trainer, reward, feed, bar, loaded.full, loaded.base_spec, rollout)


def grpo_args(plan: Plan, folder: Path, device: str) -> Any:
    """TRL's GRPOConfig of a run: one step is `groups_per_step` groups of `group_size`, split
    into micro-batches over the processes; checkpoints under <run>/checkpoints."""
    import trl

    from mleforge.train.grpo.generation import trl_generation_args
    from mleforge.train.tracking import trainer_args

    config: TrainConfig = plan.config
    steps_per_generation = config.sequences_per_step // (config.micro_batch * plan.world_size)
    return trl.GRPOConfig(
        output_dir=str(folder / CHECKPOINTS_DIR), max_steps=config.steps, per_device_train_batch_size=config.micro_batch,
        gradient_accumulation_steps=steps_per_generation, steps_per_generation=steps_per_generation,
        num_generations=config.group_size, num_iterations=1, learning_rate=config.lr,
        lr_scheduler_type=config.lr_scheduler, warmup_steps=config.warmup, beta=config.beta, loss_type=config.loss_type,
        scale_rewards=config.scale_rewards, max_grad_norm=config.max_grad_norm, shuffle_dataset=False,
        logging_steps=1, save_strategy="steps", save_steps=config.save_steps, save_total_limit=config.save_total_limit,
        **trainer_args(config.report_to, folder), disable_tqdm=True, bf16=bool(config.bf16), fp16=False, seed=config.seed,
        data_seed=config.seed, gradient_checkpointing=config.model.gradient_checkpointing,
        use_cpu=device == "cpu", remove_unused_columns=False, log_completions=False, disable_dropout=True,
        dataloader_num_workers=0, **trl_generation_args(config, config.generation.backend),
    )
