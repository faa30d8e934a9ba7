"""What a training run writes: one line per rollout, one line of metrics per step, run.json.

    rollouts/step-<k>.jsonl   RolloutLine: state, completion, outcome, reward and its
                              components, score; a rollout the infrastructure lost has
                              outcome "lost", reward null and the error
    metrics.jsonl             StepMetrics, one object per step
    run.json                  RunRecord: kind "train", the tasks it trained on (the
                              contamination guard reads them), where things are

Frozen dataclasses of JSON values with to_dict/from_dict.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

from mleforge.errors import ConfigError

LOST = "lost"  # the outcome of a rollout the infrastructure lost (no reward: left out of advantages)
# The reward components whose per-step mean is logged (RewardBreakdown's fields).
COMPONENTS = ("base", "position_term", "medal_bonus", "delta")


def _from(cls: type, data: dict[str, Any]) -> Any:
    names = {f.name for f in fields(cls)}
    missing = sorted(names - set(data))
    if missing:
        raise ConfigError(f"{cls.__name__}: missing {', '.join(missing)}")
    return cls(**{k: data[k] for k in names})


@dataclass(frozen=True)
class RolloutLine:
    step: int
    index: int  # the rollout's position in the step (global, across ranks)
    group: int  # its group (the sampled state's slot)
    rollout_id: str
    state_id: str
    task_id: str
    stage: str
    completion: str
    outcome: str  # a reward case, or "lost"
    reward: float | None
    components: dict[str, Any] | None  # RewardBreakdown.to_dict(); None when lost
    score: float | None
    error: str | None
    cached: bool
    completion_tokens: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RolloutLine:
        return _from(cls, data)


@dataclass(frozen=True)
class StepMetrics:
    """One step's figures (mleforge.train.metrics computes them). Rates are over every
    rollout of the step (they sum to 1 with lost_rate); reward figures over the scored
    ones; frac_zero_std_groups over groups with a scored rollout; frac_no_valid_groups and
    frac_no_signal_groups (tied or no valid rollout) over all groups (None in a run written
    before they existed); sampler_entropy is the
    entropy (nats) of the sampler's distribution over the snapshot the step drew from;
    tokens: completion tokens generated; the seconds are wall time of generation, of the
    reward (parse, execute, grade), and of the rest of the step (loss, backward, optimizer);
    sync_s: a rollout engine's taking the trained weights (ct2: convert and load; 0 for
    TRL's own generation), counted apart from gen_s; rollout_staleness: optimizer steps
    between the weights the rollouts sampled from and the step's (0: current)."""

    step: int
    reward_mean: float | None
    reward_std: float | None
    reward_base_mean: float | None
    reward_position_term_mean: float | None
    reward_medal_bonus_mean: float | None
    reward_delta_mean: float | None
    valid_rate: float
    format_error_rate: float
    exec_error_rate: float
    timeout_rate: float
    invalid_submission_rate: float
    lost_rate: float
    frac_zero_std_groups: float | None
    buffer_size: int
    states_added: int
    sampler_entropy: float
    gen_s: float
    exec_s: float
    update_s: float
    tokens: int
    cache_hits: int
    sync_s: float = 0.0
    rollout_staleness: int = 0
    frac_no_valid_groups: float | None = None
    frac_no_signal_groups: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StepMetrics:
        # Runs written before sync_s and rollout_staleness existed read as TRL-generated ones.
        return _from(cls, {"sync_s": 0.0, "rollout_staleness": 0, **data})


# Fields that depend on the machine and the result cache, not on the run: two runs of one
# seed (or one run and its resumed twin) differ only in these.
VOLATILE_FIELDS = ("gen_s", "exec_s", "update_s", "sync_s", "cache_hits")
