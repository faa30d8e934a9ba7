"""The Learnability Potential (AceGRPO names it; DESIGN.md, Curriculum, defines ours).

Pure functions of a state's statistics:

    p  = (s + 1) / (n + 2)                 success rate, Laplace-smoothed (n rollouts, s successes)
    L  = p (1 - p)                         largest at p = 0.5: a GRPO group there disagrees
    H  = clip(1 - (best - base) / (top - base), 0, 1)     headroom, 1 = nothing achieved yet
    U  = c sqrt(ln(1 + N) / (1 + n_s))     exploration (UCB-like), N = rollouts of the whole buffer
    LP = (L + U) H^gamma

Why L = p (1 - p): with binary outcomes the expected variance of a group's
rewards is proportional to p (1 - p), and a group with zero variance has zero
GRPO advantage: it costs a full group of executions and teaches nothing.
The `variance` variant measures that directly from the state's recent rewards,
which also sees ties among valid rewards (an improve state where every run
reproduces the same score).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

from mleforge.curriculum.config import LearnabilityConfig
from mleforge.curriculum.records import BufferSnapshot, StateStats, TaskReference

# L of a state nothing is known about (p = 0.5): the prior of the variance variant.
UNKNOWN_L = 0.25


def success_probability(successes: int, rollouts: int) -> float:
    """p = (s + 1) / (n + 2): never exactly 0 or 1, so an untried state is a coin flip."""
    if rollouts < 0 or successes < 0 or successes > rollouts:
        raise ValueError(f"need 0 <= successes <= rollouts; got {successes} of {rollouts}")
    return (successes + 1) / (rollouts + 2)


def learnability(p: float) -> float:
    """L = p (1 - p), in [0, 0.25]."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"p must be a probability; got {p!r}")
    return p * (1.0 - p)


def variance_learnability(rewards: Sequence[float], prior_weight: float, prior: float = UNKNOWN_L) -> float:
    """The continuous-reward L: the population variance of `rewards` (a state's recent
    rewards, i.e. its last GRPO groups), shrunk towards `prior` as if `prior_weight`
    more rollouts had shown it: (n var + w prior) / (n + w). With no rewards, `prior`."""
    n = len(rewards)
    if n + prior_weight == 0:
        return prior
    var = float(np.var(np.asarray(rewards, dtype=float))) if n else 0.0
    return (n * var + prior_weight * prior) / (n + prior_weight)


def headroom(best: float | None, top: float | None, baseline: float | None) -> float:
    """How far a state's best score is from the task's top reference, in [0, 1].

    progress = (best - baseline) / (top - baseline) is 0 at the baseline (the
    sample submission) and 1 at the top (the leaderboard's best); it needs no
    direction because top and baseline carry it. H = clip(1 - progress, 0, 1).
    A state with no valid score yet, or a task without both references (or
    with top == baseline), has H = 1: nothing says the state is near the top.
    """
    if best is None or top is None or baseline is None or top == baseline:
        return 1.0
    progress = (best - baseline) / (top - baseline)
    return min(1.0, max(0.0, 1.0 - progress))


def exploration(total_rollouts: int, state_rollouts: int, c: float) -> float:
    """U = c sqrt(ln(1 + N) / (1 + n_s)): grows slowly with the buffer's rollouts N,
    shrinks as the state itself is tried, so rarely tried states get their turn."""
    if total_rollouts < 0 or state_rollouts < 0:
        raise ValueError("rollout counts must be >= 0")
    return c * math.sqrt(math.log1p(total_rollouts) / (1 + state_rollouts))


def learnability_potential(L: float, U: float, H: float, gamma: float) -> float:
    """LP = (L + U) H^gamma (0^0 = 1: gamma = 0 ignores headroom entirely)."""
    return (L + U) * H**gamma


def is_success(stage: str, outcome: str, reward: float, improve_neutral: float) -> bool:
    """Success is a reward above the state's neutral point: for improve, a reward above
    `improve_neutral` (a valid run that beat the state's best); for draft and debug,
    any valid submission."""
    if stage == "improve":
        return outcome == "valid" and reward > improve_neutral
    return outcome == "valid"


@dataclass(frozen=True)
class Potential:
    """Every term of one state's LP, for logging and `buffer show`."""

    p: float
    L: float
    U: float
    H: float
    LP: float

    def to_dict(self) -> dict[str, float]:
        return asdict(self)


def state_potential(
    stats: StateStats, total_rollouts: int, reference: TaskReference | None, config: LearnabilityConfig
) -> Potential:
    """The LP of one state given N (`total_rollouts`) and its task's references."""
    p = success_probability(stats.successes, stats.rollouts)
    if config.variant == "variance":
        L = variance_learnability(stats.last_rewards, config.variance_prior_weight)
    else:
        L = learnability(p)
    U = exploration(total_rollouts, stats.rollouts, config.exploration_c)
    top = reference.top if reference else None
    baseline = reference.baseline if reference else None
    H = headroom(stats.best_score, top, baseline)
    return Potential(p, L, U, H, learnability_potential(L, U, H, config.headroom_gamma))


def snapshot_potentials(snapshot: BufferSnapshot, config: LearnabilityConfig) -> list[Potential]:
    """The LP of every state of a snapshot, in the snapshot's order."""
    n_total = snapshot.total_rollouts
    return [state_potential(s, n_total, snapshot.tasks.get(s.task_id), config) for s in snapshot.states]
