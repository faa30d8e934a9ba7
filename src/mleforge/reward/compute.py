"""The reward of one action: one function per case, composed by `compute_reward`.

    format_error               -> r_format   (-0.3)
    execution_error | timeout  -> r_fail     (-0.2)
    invalid_submission         -> r_invalid  (-0.1)
    valid -> valid_floor + (1 - valid_floor) * sigmoid(alpha * clip(delta))
             + position_weight * position + medal bonus
             delta = sign * (score - reference) / max(scale, scale_floor)

With the default weights (valid_floor 0) a valid run that does not change the
score earns exactly 0.5, and any valid run earns more than any failure
(RewardConfig checks that its constants keep it so).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from mleforge.reward.components import (
    CASES,
    FAILURE_CASES,
    improvement_delta,
    position_score,
    sigmoid,
)
from mleforge.reward.config import RewardConfig


@dataclass(frozen=True)
class RewardBreakdown:
    """Every component of one reward, for logging. Components that do not apply are None."""

    case: str
    total: float
    score: float | None = None
    reference: float | None = None
    scale: float | None = None  # the scale used (after the floor)
    delta: float | None = None  # before clipping
    base: float | None = None  # sigmoid(alpha * clip(delta))
    position: float | None = None  # the raw position score in [0, 1]
    position_term: float = 0.0  # position_weight * position
    medal: str | None = None
    medal_bonus: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RewardBreakdown:
        return cls(**data)


def format_error_reward(config: RewardConfig) -> RewardBreakdown:
    return RewardBreakdown(case="format_error", total=config.failure_reward("format_error"))


def failure_reward(case: str, config: RewardConfig) -> RewardBreakdown:
    if case not in FAILURE_CASES:
        raise ValueError(f"case must be one of {', '.join(FAILURE_CASES)}; got {case!r}")
    return RewardBreakdown(case=case, total=config.failure_reward(case))


def _finite(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number; got {value!r}")
    return float(value)


def _is_finite_number(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)


def valid_reward(
    score: float,
    reference: float,
    scale: float,
    is_lower_better: bool,
    config: RewardConfig,
    leaderboard_scores: Sequence[float] | None = None,
    medal: str | None = None,
) -> RewardBreakdown:
    """The reward of a valid submission (see the module's docstring).

    `leaderboard_scores` is needed only when `config.position_weight` > 0;
    `medal` (from `medal_of`) only matters when medal bonuses are set.
    """
    score = _finite("score", score)
    reference = _finite("reference", reference)
    scale = max(_finite("scale", scale), config.scale_floor)
    delta = improvement_delta(score, reference, scale, is_lower_better)
    clipped = min(max(delta, -config.delta_clip), config.delta_clip)
    base = sigmoid(config.alpha * clipped)
    position = None
    position_term = 0.0
    if config.position_weight > 0:
        if leaderboard_scores is None:
            raise ValueError("position_weight > 0 needs the leaderboard's scores")
        position = position_score(score, leaderboard_scores, is_lower_better)
        position_term = config.position_weight * position
    bonus = config.medal_bonus(medal)
    return RewardBreakdown(
        case="valid",
        total=config.valid_total(base) + position_term + bonus,
        score=score,
        reference=reference,
        scale=scale,
        delta=delta,
        base=base,
        position=position,
        position_term=position_term,
        medal=medal,
        medal_bonus=bonus,
    )


def compute_reward(
    case: str,
    *,
    score: float | None = None,
    reference: float | None = None,
    scale: float | None = None,
    is_lower_better: bool = False,
    config: RewardConfig | None = None,
    leaderboard_scores: Sequence[float] | None = None,
    medal: str | None = None,
) -> RewardBreakdown:
    """The reward of one action whose outcome is `case` (see `classify_outcome`).

    For `valid`, `score`, `reference` (see `reference_score`) and `scale` (see
    `task_scale`) are required; for the other cases they are ignored. A `valid` case
    whose score is missing or not a finite number is rewarded as `invalid_submission`.
    """
    config = config or RewardConfig()
    if case not in CASES:
        raise ValueError(f"case must be one of {', '.join(CASES)}; got {case!r}")
    if case == "format_error":
        return format_error_reward(config)
    if case != "valid":
        return failure_reward(case, config)
    if not _is_finite_number(score):
        # A grade report's score is finite when valid; a nan (an `mlebench:` grader's valid
        # nan) or anything else earns what an invalid submission earns, never an exception.
        return failure_reward("invalid_submission", config)
    missing = [n for n, v in (("reference", reference), ("scale", scale)) if v is None]
    if missing:
        raise ValueError(f"a valid outcome needs {', '.join(missing)} to be rewarded")
    return valid_reward(
        score, reference, scale, is_lower_better, config,  # type: ignore[arg-type]
        leaderboard_scores=leaderboard_scores, medal=medal,
    )
