"""The reward module's configuration: one dataclass, defaults are the source of truth."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from mleforge.errors import ConfigError
from mleforge.reward.components import sigmoid, task_scale

SCALE_SOURCES = ("gold_median", "std")
# Scales below this are treated as this: a leaderboard whose entries all tie
# would otherwise divide by zero. Absolute, in the metric's own units.
DEFAULT_SCALE_FLOOR = 1e-6


@dataclass(frozen=True)
class RewardConfig:
    """Constants of the reward (DESIGN.md, "Reward module").

    alpha = 3.0: delta is measured in units of the task's spread (|gold - median|
    by default), so delta = 1 is a jump as large as from the median to gold.
    With alpha = 3 that jump earns sigmoid(3) = 0.953 and the mirror-image drop
    0.047, so the usual range of outcomes spans almost all of (0, 1) without
    saturating; the slope at no change is alpha / 4 = 0.75 per unit of delta,
    so a tenth of the spread is worth +0.074. A larger alpha saturates on
    ordinary improvements (ties again, zero GRPO advantage); a smaller one
    squeezes every valid outcome towards 0.5.

    The failures are ordered, and kept apart so that a group of failures still has
    an advantage to learn from: a format error (-0.3) < a crash or timeout (-0.2) <
    an invalid or missing submission (-0.1) < every valid run. With valid_floor 0 a
    valid run earns sigmoid(...) in (0, 1), at least sigmoid(-alpha * delta_clip) =
    9.4e-14 with the defaults, so a failure must earn below that: hence negatives.
    valid_floor f > 0 maps the sigmoid into (f, 1), for failure rewards in [0, f) if
    one wants every reward non-negative; the neutral point moves to f + (1 - f) / 2,
    which TrainConfig passes on to the curriculum's improve_neutral. The spacing
    (0.1) is a choice, not a measurement: with group-scaled advantages only the
    order within a group matters for an all-failure group, and a gap of 0.1 keeps
    the step from the best failure to a neutral valid run (0.6) six times larger
    than a step between failures.
    """

    # The failures, ordered (DESIGN.md, "Reward module"): no parsable action < an action that
    # crashed or timed out < one that ran but wrote no valid submission < any valid run.
    r_format: float = -0.3  # completion without a parsable action
    r_fail: float = -0.2  # parsed, but the run crashed, was killed, or timed out
    r_invalid: float = -0.1  # ran to the end, but the submission is missing or invalid
    # valid = valid_floor + (1 - valid_floor) * sigmoid(alpha * clip(delta)) (+ bonuses): the
    # floor lifts every valid run above a failure reward of up to valid_floor; 0 keeps the
    # sigmoid's (0, 1), so the failures above are negative.
    valid_floor: float = 0.0
    alpha: float = 3.0
    # delta is clipped to [-delta_clip, delta_clip] so the sigmoid never rounds to 0 or 1:
    # a valid run always earns strictly more than r_fail.
    delta_clip: float = 10.0
    scale_source: str = "gold_median"  # see reward.components.task_scale
    scale_floor: float = DEFAULT_SCALE_FLOOR
    position_weight: float = 0.0  # weight of MLE-Dojo's position score, added to the sigmoid term
    medal_bonus_gold: float = 0.0
    medal_bonus_silver: float = 0.0
    medal_bonus_bronze: float = 0.0

    def __post_init__(self) -> None:
        numbers = {k: v for k, v in asdict(self).items() if k != "scale_source"}
        for key, value in numbers.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
                raise ConfigError(f"reward.{key}: got {value!r}; expected a number")
            if abs(value) == float("inf"):
                raise ConfigError(f"reward.{key}: got {value!r}; expected a finite number")
        if self.alpha <= 0:
            raise ConfigError(
                f"reward.alpha: got {self.alpha}; expected > 0 (the sigmoid's steepness; "
                "0 would give every valid run 0.5, a negative value would reward getting worse)"
            )
        if self.delta_clip <= 0:
            raise ConfigError(f"reward.delta_clip: got {self.delta_clip}; expected > 0")
        if self.scale_source not in SCALE_SOURCES:
            raise ConfigError(
                f"reward.scale_source: got {self.scale_source!r}; expected one of {', '.join(SCALE_SOURCES)}"
            )
        if self.scale_floor <= 0:
            raise ConfigError(
                f"reward.scale_floor: got {self.scale_floor}; expected > 0 (it guards the division "
                "by the task's scale)"
            )
        for key in ("position_weight", "medal_bonus_gold", "medal_bonus_silver", "medal_bonus_bronze"):
            if getattr(self, key) < 0:
                raise ConfigError(
                    f"reward.{key}: got {getattr(self, key)}; expected >= 0 (a negative bonus "
                    "could rank a valid submission below a failure)"
                )
        if not 0 <= self.valid_floor < 1:
            raise ConfigError(f"reward.valid_floor: got {self.valid_floor}; expected 0 <= floor < 1 (the "
                              "lowest a valid run can earn before its sigmoid term)")
        if self.r_format > self.r_fail:
            raise ConfigError(
                f"reward.r_format ({self.r_format}) > reward.r_fail ({self.r_fail}): a completion "
                "that runs nothing must not earn more than one that runs and fails, or the policy "
                "learns to stop writing code"
            )
        if self.r_fail > self.r_invalid:
            raise ConfigError(
                f"reward.r_fail ({self.r_fail}) > reward.r_invalid ({self.r_invalid}): a run that "
                "crashes must not earn more than one that finishes with an invalid submission"
            )
        lowest_valid = self.lowest_valid_reward
        if self.r_invalid >= lowest_valid:
            raise ConfigError(
                f"reward.r_invalid ({self.r_invalid}) must be below the lowest reward of a valid run, "
                f"valid_floor + (1 - valid_floor) * sigmoid(-alpha * delta_clip) = {lowest_valid:.3g}, "
                "so any valid submission beats any failure; lower the failure rewards or raise valid_floor"
            )

    def valid_total(self, base: float) -> float:
        """A valid run's reward before bonuses, from its sigmoid term `base` in (0, 1)."""
        return self.valid_floor + (1.0 - self.valid_floor) * base

    @property
    def lowest_valid_reward(self) -> float:
        """What the worst valid run earns: the clipped sigmoid above the floor, with no bonus."""
        return self.valid_total(sigmoid(-self.alpha * self.delta_clip))

    @property
    def neutral_reward(self) -> float:
        """What a valid run that does not change the score earns (delta 0): the curriculum's
        improve success threshold (LearnabilityConfig.improve_neutral)."""
        return self.valid_total(0.5)

    def failure_reward(self, case: str) -> float:
        """The reward of a failure case (components.FAILURE_CASES) or a format error."""
        rewards = {"format_error": self.r_format, "execution_error": self.r_fail, "timeout": self.r_fail,
                   "invalid_submission": self.r_invalid}
        if case not in rewards:
            raise ValueError(f"case must be one of {', '.join(rewards)}; got {case!r}")
        return float(rewards[case])

    def task_scale(self, leaderboard_scores: Sequence[float], is_lower_better: bool) -> float:
        """The task's scale from its leaderboard, by this config's source and floor."""
        return task_scale(leaderboard_scores, is_lower_better, self.scale_source, self.scale_floor)

    def medal_bonus(self, medal: str | None) -> float:
        if medal is None:
            return 0.0
        bonuses = {
            "gold": self.medal_bonus_gold,
            "silver": self.medal_bonus_silver,
            "bronze": self.medal_bonus_bronze,
        }
        if medal not in bonuses:
            raise ValueError(f"medal must be gold, silver, bronze or None; got {medal!r}")
        return bonuses[medal]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RewardConfig:
        return cls(**data)
