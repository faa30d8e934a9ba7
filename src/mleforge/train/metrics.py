"""One GRPO step's figures, as pure functions of its rollouts (mleforge.train.records).

    outcome_rates     the share of each outcome among all the step's rollouts
    reward_summary    mean and population std (ddof 0) of the scored rewards
    component_means   each reward component's mean over the rollouts that have it
    frac_tied_groups  the share of groups whose scored rewards all tie: zero advantage
    frac_no_valid_groups   the share of groups none of whose rollouts wrote a valid submission
    frac_no_signal_groups  the share of groups that are tied or have no valid rollout: the
                      compute GRPO spends without learning anything of the task's metric (the
                      reward orders failures, so a group of failures is rarely tied, yet its
                      advantages only rank kinds of failure)
    entropy           of the sampler's distribution, in nats (ln |states| when uniform)
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from mleforge.train.records import COMPONENTS, LOST, RolloutLine, StepMetrics

RATE_KEYS = {
    "valid": "valid_rate", "format_error": "format_error_rate", "execution_error": "exec_error_rate",
    "timeout": "timeout_rate", "invalid_submission": "invalid_submission_rate", LOST: "lost_rate",
}


def outcome_rates(outcomes: Sequence[str]) -> dict[str, float]:
    n = len(outcomes)
    if n == 0:
        return {key: 0.0 for key in RATE_KEYS.values()}
    return {key: sum(o == case for o in outcomes) / n for case, key in RATE_KEYS.items()}


def reward_summary(rewards: Sequence[float | None]) -> tuple[float | None, float | None]:
    scored = [r for r in rewards if r is not None]
    if not scored:
        return None, None
    mean = sum(scored) / len(scored)
    return mean, math.sqrt(sum((r - mean) ** 2 for r in scored) / len(scored))


def component_means(components: Sequence[Mapping[str, Any] | None]) -> dict[str, float | None]:
    out = {}
    for name in COMPONENTS:
        values = [c[name] for c in components if c is not None and c.get(name) is not None]
        out[f"reward_{name}_mean"] = sum(values) / len(values) if values else None
    return out


def frac_tied_groups(groups: Sequence[Sequence[float | None]]) -> float | None:
    """Groups with at least one scored reward whose scored rewards are all equal, over those
    groups; None when no group has a scored reward."""
    scored = [[r for r in g if r is not None] for g in groups]
    scored = [g for g in scored if g]
    if not scored:
        return None
    return sum(max(g) == min(g) for g in scored) / len(scored)


def frac_no_valid_groups(outcomes: Sequence[Sequence[str]]) -> float | None:
    """Groups (each its rollouts' outcomes) with no valid rollout, over all groups; None for none."""
    return sum("valid" not in g for g in outcomes) / len(outcomes) if outcomes else None


def frac_no_signal_groups(groups: Sequence[Sequence[float | None]], outcomes: Sequence[Sequence[str]]) -> float | None:
    """Groups (their rewards, and their outcomes in the same order) that are tied or have no
    valid rollout, over all groups; None for none."""
    if not groups:
        return None
    return sum(frac_tied_groups([g]) == 1.0 or "valid" not in o for g, o in zip(groups, outcomes, strict=True)) / len(groups)


def entropy(probabilities: Sequence[float]) -> float:
    return 0.0 - sum(p * math.log(p) for p in probabilities if p > 0)  # 0.0, not -0.0, for one state


def step_metrics(
    step: int,
    lines: Sequence[RolloutLine],
    *,
    buffer_size: int,
    states_added: int,
    sampler_entropy: float,
    gen_s: float,
    exec_s: float,
    update_s: float,
    sync_s: float = 0.0,
    rollout_staleness: int = 0,
) -> StepMetrics:
    groups: dict[int, list[float | None]] = {}
    outcomes: dict[int, list[str]] = {}
    for line in lines:
        groups.setdefault(line.group, []).append(line.reward)
        outcomes.setdefault(line.group, []).append(line.outcome)
    mean, std = reward_summary([line.reward for line in lines])
    return StepMetrics(
        step=step, reward_mean=mean, reward_std=std,
        **component_means([line.components for line in lines]),
        **outcome_rates([line.outcome for line in lines]),
        frac_zero_std_groups=frac_tied_groups(list(groups.values())),
        frac_no_valid_groups=frac_no_valid_groups(list(outcomes.values())),
        frac_no_signal_groups=frac_no_signal_groups(list(groups.values()), [outcomes[g] for g in groups]),
        buffer_size=buffer_size, states_added=states_added, sampler_entropy=sampler_entropy,
        gen_s=round(gen_s, 3), exec_s=round(exec_s, 3), update_s=round(update_s, 3), sync_s=round(sync_s, 3),
        rollout_staleness=rollout_staleness,
        tokens=sum(line.completion_tokens for line in lines), cache_hits=sum(line.cached for line in lines),
    )
