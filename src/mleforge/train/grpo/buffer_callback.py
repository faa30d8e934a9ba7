"""The feedback callback: each finished step goes back to the buffer once, on the main process.

At the end of every optimizer step (before transformers saves a checkpoint), the step's
rollouts are gathered from every rank (in the step's order: each rollout's index is its
row's place in TRL's split of the step across ranks); the main process then

  1. feeds them to the buffer with `curriculum.feedback.step_feedback` (statistics, the new
     debug and improve states, the step sealed: one transaction), leaving out the rollouts
     the infrastructure lost, which count for nothing;
  2. writes `rollouts/step-<k>.jsonl` (atomically) and appends the step's line to
     `metrics.jsonl` (fsynced), and sends it to the run's tracker (mleforge.train.tracking);
  3. shows the step's figures on the progress bar.

So when checkpoint-<k+1> exists, the buffer is sealed through step k, and the checkpoint
records that step (mleforge.train.checkpoint_marks) for a resume to rewind the buffer to.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from transformers import TrainerCallback

from mleforge.curriculum.buffer import StateBuffer
from mleforge.curriculum.feedback import step_feedback
from mleforge.runs import METRICS_FILE, ROLLOUTS_DIR
from mleforge.train.grpo.executing_reward import ExecutingReward, Rollout
from mleforge.train.grpo.state_feed import CurriculumFeed
from mleforge.train.metrics import step_metrics
from mleforge.train.records import LOST, RolloutLine, StepMetrics
from mleforge.train.tracking import log_step
from mleforge.utils.atomic import atomic_write

if TYPE_CHECKING:
    from mleforge.train.grpo.trainer import CurriculumGRPOTrainer



def rollout_line(r: Rollout) -> RolloutLine:
    outcome = r.outcome
    if outcome is None:
        return RolloutLine(r.step, r.index, r.group, r.rollout_id, r.state.state_id, r.state.task_id, r.state.stage,
                           r.completion, LOST, None, None, None, r.lost, False, r.completion_tokens)
    valid = outcome.node.outcome == "valid"
    return RolloutLine(
        r.step, r.index, r.group, r.rollout_id, r.state.state_id, r.state.task_id, r.state.stage, r.completion,
        outcome.node.outcome, outcome.reward.total, outcome.reward.to_dict(),
        outcome.reward.score if valid else None, outcome.node.error,
        bool(outcome.result is not None and outcome.result.cached), r.completion_tokens,
    )


def share(value: float | None) -> str:
    """A fraction on the progress line: two decimals, "-" where the step has none."""
    return "-" if value is None else f"{value:.2f}"


def append_line(path: Path, data: dict[str, Any]) -> None:
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(data) + "\n")
        handle.flush()
        os.fsync(handle.fileno())


class FeedbackCallback(TrainerCallback):
    def __init__(self, *, trainer: CurriculumGRPOTrainer, buffer: StateBuffer, feed: CurriculumFeed, reward: ExecutingReward,
                 run_dir: Path, grow: bool, progress: Any = None):
        self.trainer = trainer
        self.buffer = buffer
        self.feed = feed
        self.reward = reward
        self.run_dir = Path(run_dir)
        self.grow = grow
        self.progress = progress
        self._began = time.perf_counter()
        if trainer.accelerator.is_main_process:  # the one process that writes the run directory
            (self.run_dir / ROLLOUTS_DIR).mkdir(parents=True, exist_ok=True)

    def on_step_begin(self, args, state, control, **kwargs):
        self._began = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        step = state.global_step - 1
        local, exec_s = self.reward.take(step)
        accelerator = self.trainer.accelerator
        rollouts = local
        if accelerator.num_processes > 1:
            from accelerate.utils import gather_object

            rollouts = sorted(gather_object(local), key=lambda r: r.index)
        if accelerator.is_main_process:
            self.feed_back(step, rollouts, exec_s, time.perf_counter() - self._began)
        else:
            self.trainer.timings.pop(step, None)  # the main process's figures are the step's

    def feed_back(self, step: int, rollouts: list[Rollout], exec_s: float, step_s: float) -> StepMetrics:
        scored = [r for r in rollouts if r.outcome is not None]
        summary = step_feedback(
            self.buffer, step, [r.state for r in scored], [r.completion for r in scored],
            [r.outcome.result for r in scored], [r.outcome.reward for r in scored],  # type: ignore[union-attr]
            rollout_ids=[r.rollout_id for r in scored], errors=[r.outcome.node.error for r in scored],  # type: ignore[union-attr]
            offer_states=self.grow, feedback=self.reward.feedback,
        )
        lines = [rollout_line(r) for r in rollouts]
        atomic_write(self.run_dir / ROLLOUTS_DIR / f"step-{step}.jsonl",
                     "".join(json.dumps(line.to_dict(), ensure_ascii=False) + "\n" for line in lines))
        timing = self.trainer.timings.pop(step, {})
        generate_and_reward = timing.get("generate_and_reward_s", 0.0)
        sync_s = timing.get("sync_s", 0.0)  # the rollout engine taking the weights: not generation
        metrics = step_metrics(
            step, lines, buffer_size=self.buffer.counts()["live_states"], states_added=summary.new_states,
            sampler_entropy=self.feed.batch(step).sampler_entropy,
            gen_s=max(0.0, generate_and_reward - exec_s - sync_s), exec_s=exec_s,
            update_s=max(0.0, step_s - timing.get("feed_s", 0.0) - generate_and_reward),
            sync_s=sync_s, rollout_staleness=int(timing.get("rollout_staleness", 0)),
        )
        append_line(self.run_dir / METRICS_FILE, metrics.to_dict())
        log_step(self.trainer, metrics.to_dict())
        if self.progress is not None:
            reward = "-" if metrics.reward_mean is None else f"{metrics.reward_mean:.3f}"
            self.progress.set_figures(f"reward {reward}  valid {metrics.valid_rate:.0%}  "
                                      f"buffer {metrics.buffer_size}  tied {share(metrics.frac_zero_std_groups)}  "
                                      f"no signal {share(metrics.frac_no_signal_groups)}")
        return metrics
