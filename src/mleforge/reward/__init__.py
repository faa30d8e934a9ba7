"""The reward module (ML-Agent style): pure functions of an action's outcome.

It takes the outcome's case (or a grade), the reference score and the task's
scale, and knows nothing of prompts, states or executors. See DESIGN.md,
"Reward module", and `mleforge.reward.compute`.
"""

from mleforge.reward.components import (
    CASES,
    FAILURE_CASES,
    classify_outcome,
    improvement_delta,
    medal_of,
    position_score,
    reference_score,
    sigmoid,
    task_scale,
)
from mleforge.reward.compute import (
    RewardBreakdown,
    compute_reward,
    failure_reward,
    format_error_reward,
    valid_reward,
)
from mleforge.reward.config import RewardConfig

__all__ = [
    "CASES",
    "FAILURE_CASES",
    "RewardBreakdown",
    "RewardConfig",
    "classify_outcome",
    "compute_reward",
    "failure_reward",
    "format_error_reward",
    "improvement_delta",
    "medal_of",
    "position_score",
    "reference_score",
    "sigmoid",
    "task_scale",
    "valid_reward",
]
