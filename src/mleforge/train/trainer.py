"""The GRPO trainer: TRL's GRPOTrainer, with its prompts from the curriculum and seeded steps.

Everything GRPO is TRL's: generation (or the engine behind `rollout_func`), the group
advantages (a None reward is NaN and left out), the loss, the optimizer, checkpoints.
This subclass changes one method. When TRL generates for a step it gets placeholder rows
(mleforge.train.feed); the subclass fills them with the step's states and prompts, and
seeds torch's RNG from (seed, step, rank) first, so a step's sampling, the shuffle of its
batch and anything else random in it depend only on the seed and the step, whether the run
went straight through or was resumed from a checkpoint. It also times the step's
generation and reward, and takes what a rollout engine reports of the step (its weight
sync's seconds, the staleness of the weights it sampled from); mleforge.train.feedback
turns them into metrics.

Imports TRL: use it only where the `train` extra is installed.
"""

from __future__ import annotations

import time
from collections import defaultdict
from typing import Any

import torch
from trl import GRPOTrainer

from mleforge.policies.base import derive_seed
from mleforge.train.feed import CurriculumFeed
from mleforge.train.generation import rollout_figures


def step_seed(seed: int, step: int, rank: int) -> int:
    """The seed of one rank's step: different ranks sample different completions."""
    return derive_seed(seed, step, rank)  # type: ignore[return-value]


class CurriculumGRPOTrainer(GRPOTrainer):
    def __init__(self, *args: Any, feed: CurriculumFeed, run_seed: int, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.feed = feed
        self.run_seed = run_seed
        self.timings: dict[int, dict[str, float]] = defaultdict(dict)

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        step = self.state.global_step
        started = time.perf_counter()
        rows = self.feed.rows(step, inputs)
        seed = step_seed(self.run_seed, step, self.accelerator.process_index)
        torch.manual_seed(seed)
        if torch.cuda.is_available():
            torch.cuda.manual_seed_all(seed)
        drawn = time.perf_counter()
        output = super()._generate_and_score_completions(rows)
        self.timings[step].update(feed_s=drawn - started, generate_and_reward_s=time.perf_counter() - drawn,
                                  **rollout_figures(self.rollout_func, step))
        return output
