"""What a GRPO group with no valid rollout teaches: TrainConfig.invalid_groups.

TRL standardises each group's rewards into advantages, (r - mean) / (std + 1e-4) under
scale_rewards "group". The reward orders the failures (reward.RewardConfig: a format error
< a crash or timeout < an invalid submission < every valid run), so a group whose rollouts all
failed is still untied, and standardisation turns its small gaps into advantages of unit size:
rewards (-0.2, -0.1, -0.2, -0.2) become (-0.5, +1.5, -0.5, -0.5), as large as the advantages
of a group that found a valid submission. Whether that helps (the order of failures is real
information) or hurts (it reinforces one failure over another as strongly as a success) is a
question for measurement (benchmarks/grpo_sweep.py), so it is a setting:

    standardize   TRL's advantages, unchanged (the default: what runs did before the setting)
    zero          such a group teaches nothing: every advantage 0
    raw           r - mean(r) of the group, unscaled: the failures' gaps as they are (0.1 apart),
                  small beside a valid group's standardised advantages

A rollout is valid when its reward is at least the lowest reward a valid run can earn
(RewardConfig.lowest_valid_reward, above every failure reward); a lost rollout (None, NaN in
TRL's tensor) is neither valid nor counted in the mean, and its advantage stays 0, as TRL's.
Pure functions over lists; the trainer (mleforge.train.grpo.trainer) applies them to TRL's tensor.

TrainConfig.shuffle_rewards, a null control (benchmarks/learning.py), permutes each group's
rewards before TRL computes the advantages (`group_permutation`): the updates keep GRPO's size
and lose the link between a completion and its reward.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

INVALID_GROUPS = ("standardize", "zero", "raw")


def _scored(reward: float | None) -> bool:
    return reward is not None and not math.isnan(reward)


def invalid_groups_of(rewards: Sequence[float | None], group_size: int, valid_from: float) -> list[bool]:
    """For each group of `group_size` consecutive rewards (TRL's layout), whether none of its
    rollouts is valid (reward >= valid_from; a lost rollout is not valid)."""
    if group_size < 1 or len(rewards) % group_size:
        raise ValueError(f"{len(rewards)} rewards do not split into groups of {group_size}")
    return [not any(_scored(r) and r >= valid_from for r in rewards[start:start + group_size])
            for start in range(0, len(rewards), group_size)]


def treat_invalid_groups(advantages: Sequence[float], rewards: Sequence[float | None], group_size: int,
                         valid_from: float, mode: str) -> list[float]:
    """TRL's `advantages` of a step with the groups that have no valid rollout treated by `mode`
    (INVALID_GROUPS); the other groups' advantages are returned as they are."""
    if mode not in INVALID_GROUPS:
        raise ValueError(f"mode must be one of {', '.join(INVALID_GROUPS)}; got {mode!r}")
    if len(advantages) != len(rewards):
        raise ValueError(f"{len(advantages)} advantages for {len(rewards)} rewards")
    out = [float(a) for a in advantages]
    if mode == "standardize":
        return out
    for g, invalid in enumerate(invalid_groups_of(rewards, group_size, valid_from)):
        if not invalid:
            continue
        rows = range(g * group_size, (g + 1) * group_size)
        scored = [float(rewards[i]) for i in rows if _scored(rewards[i])]  # type: ignore[arg-type]
        mean = sum(scored) / len(scored) if scored else 0.0
        for i in rows:
            out[i] = float(rewards[i]) - mean if mode == "raw" and _scored(rewards[i]) else 0.0  # type: ignore[arg-type]
    return out


def group_permutation(rows: int, group_size: int, seed: int) -> list[int]:
    """A seeded permutation of `rows` indices that moves each index only within its group of
    `group_size` consecutive rows: new row i takes the reward of old row perm[i]."""
    if group_size < 1 or rows % group_size:
        raise ValueError(f"{rows} rows do not split into groups of {group_size}")
    rng = random.Random(seed)
    out: list[int] = []
    for start in range(0, rows, group_size):
        group = list(range(start, start + group_size))
        rng.shuffle(group)
        out += group
    return out
