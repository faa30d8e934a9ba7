"""The curriculum's records: what goes into the buffer and what a snapshot of it holds.

Plain frozen dataclasses of JSON values; the buffer (SQLite) stores them as rows.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from mleforge.agent.journal import DIRECTIONS
from mleforge.agent.state import State
from mleforge.curriculum.errors import CurriculumError
from mleforge.reward.components import CASES

# The step that set-up writes (seeds) belong to: sampling training step 0 reads
# the snapshot as of this step.
SETUP_STEP = -1


@dataclass(frozen=True)
class TaskReference:
    """What headroom is measured against: the task's top reference (the leaderboard's
    best) and its baseline (the sample submission's score, else the leaderboard's
    worst). Either may be unknown (None): headroom is then 1, i.e. unknown."""

    task_id: str
    direction: str  # "higher" or "lower" is better
    top: float | None = None
    baseline: float | None = None

    def __post_init__(self) -> None:
        if self.direction not in DIRECTIONS:
            raise CurriculumError(f"direction must be higher or lower; got {self.direction!r}")
        for name in ("top", "baseline"):
            value = getattr(self, name)
            if value is not None and not math.isfinite(value):
                raise CurriculumError(f"task {self.task_id}: {name} must be finite or None; got {value!r}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Offer:
    """A state offered to the buffer, with where it came from (None for seeds)."""

    state: State
    parent_state_id: str | None = None  # the state the rollout was sampled from
    rollout_id: str | None = None


@dataclass(frozen=True)
class RolloutRecord:
    """One executed rollout of a buffer state, as the buffer counts it (one `events` row).

    `success` is decided by the caller with `learnability.is_success` (the
    state's neutral point); `score` is the graded score of a valid run.
    """

    state_id: str
    reward: float
    success: bool
    outcome: str  # the reward case (mleforge.reward.CASES)
    score: float | None = None
    rollout_id: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.reward, bool) or not isinstance(self.reward, (int, float)) or not math.isfinite(self.reward):
            raise CurriculumError(f"rollout {self.rollout_id}: reward must be a finite number; got {self.reward!r}")
        if self.outcome not in CASES:
            raise CurriculumError(f"rollout {self.rollout_id}: outcome must be one of {', '.join(CASES)}")
        if self.score is not None and not math.isfinite(self.score):
            raise CurriculumError(f"rollout {self.rollout_id}: score must be finite or None; got {self.score!r}")


@dataclass(frozen=True)
class StateStats:
    """A state's statistics as of one step (what the sampler and LP read)."""

    state_id: str
    task_id: str
    stage: str
    direction: str
    is_seed: bool
    rollouts: int
    successes: int
    reward_sum: float
    reward_sumsq: float
    last_rewards: tuple[float, ...]  # oldest first
    best_score: float | None  # the best of the state's journal and of its valid rollouts
    last_sampled_step: int | None
    added_step: int

    @property
    def mean_reward(self) -> float | None:
        return self.reward_sum / self.rollouts if self.rollouts else None

    @property
    def reward_var(self) -> float | None:
        """Population variance of every reward the state earned."""
        if not self.rollouts:
            return None
        mean = self.reward_sum / self.rollouts
        return max(self.reward_sumsq / self.rollouts - mean * mean, 0.0)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["last_rewards"] = list(self.last_rewards)
        return data


@dataclass(frozen=True)
class BufferSnapshot:
    """The buffer's live states and their statistics as of the end of step `as_of`,
    sorted by state_id: every rank that reads the same `as_of` gets equal snapshots."""

    as_of: int
    states: tuple[StateStats, ...]
    tasks: Mapping[str, TaskReference]
    rollouts_counted: int | None = None  # every rollout through as_of, evicted states' too

    @property
    def total_rollouts(self) -> int:
        """N of the exploration term: every rollout the buffer counted through `as_of`
        (evicted states included); without that count, the snapshot's states' rollouts."""
        if self.rollouts_counted is not None:
            return self.rollouts_counted
        return sum(s.rollouts for s in self.states)

    @property
    def state_ids(self) -> tuple[str, ...]:
        return tuple(s.state_id for s in self.states)

    def __len__(self) -> int:
        return len(self.states)
