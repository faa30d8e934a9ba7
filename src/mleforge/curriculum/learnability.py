"""The Learnability Potential (AceGRPO names it; DESIGN.md, Curriculum, defines ours).

Pure functions of a state's statistics. State s of task t and stage g has n_s
rollouts, k_s of them successes (a reward above the state's neutral point,
`is_success`); its peers are the live states of the same task and stage, with
S_tg successes in N_tg rollouts pooled:

    q  = (S_tg + 1) / (N_tg + 2)           the peers' pooled success rate (the prior's mean)
    a  = k_s + m q,  b = n_s - k_s + m (1 - q)     p ~ Beta(a, b): empirical Bayes, strength m
    L  = 1 - E[p^G] - E[(1 - p)^G]         P(a GRPO group of G rollouts is not all tied)
         E[p^G] = prod_{i<G} (a + i) / (a + b + i)     (and (1 - p)^G: a and b swapped)
    H  = clip(1 - (best - base) / (top - base), 0, 1)     headroom, 1 = nothing achieved yet
    U  = c sqrt(ln(1 + N) / (1 + n_s))     exploration, N = every rollout ever counted
    LP = (L + U) H^gamma                   gamma = 0 by default: headroom off

Why this L: a group whose rewards all tie has zero GRPO advantage; it costs a
full group of executions and teaches nothing. L is the probability of the
opposite, the very figure the curriculum is judged by. Under the posterior,
uncertainty lowers L (a Beta(1, 1) state is all-tied with probability 2/(G+1),
a well-measured p = 0.5 state with probability 2^(1-G)), so the sampler
prefers well-known frontier states and leaves the untried to U. The prior is
the peers' rate, not a coin flip: an untried debug state of a task whose
debug states always fail is expected to fail too.

Variants (LearnabilityConfig.variant): `beta` (the above, the default);
`laplace`, the earlier definition, p = (k_s + 1) / (n_s + 2) and L = p (1 - p),
kept for comparison (it was measured with gamma = 1); `variance`, the
population variance of the state's recent rewards shrunk towards 0.25, which
also sees ties among valid rewards (an improve state where every run
reproduces the same score).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass

import numpy as np

from mleforge.curriculum.config import SUCCESS_KINDS, LearnabilityConfig
from mleforge.curriculum.records import BufferSnapshot, StateStats, TaskReference

# L of a state nothing is known about (p = 0.5): the prior of the variance variant.
UNKNOWN_L = 0.25


def success_probability(successes: int, rollouts: int) -> float:
    """p = (s + 1) / (n + 2): never exactly 0 or 1, so an untried state is a coin flip."""
    if rollouts < 0 or successes < 0 or successes > rollouts:
        raise ValueError(f"need 0 <= successes <= rollouts; got {successes} of {rollouts}")
    return (successes + 1) / (rollouts + 2)


def learnability(p: float) -> float:
    """The laplace variant's L = p (1 - p), in [0, 0.25]."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"p must be a probability; got {p!r}")
    return p * (1.0 - p)


def pooled_rate(successes: int, rollouts: int) -> float:
    """q = (S_tg + 1) / (N_tg + 2): the pooled success rate of a state's peers (the live
    states of its task and stage), Laplace-smoothed so that a new task's prior is 1/2."""
    return success_probability(successes, rollouts)


def beta_posterior(successes: int, rollouts: int, q: float, strength: float) -> tuple[float, float]:
    """(a, b) = (k + m q, n - k + m (1 - q)): the state's own counts on top of a prior of
    mean q worth m pseudo-rollouts. Both are > 0 when m > 0 and 0 < q < 1."""
    if rollouts < 0 or successes < 0 or successes > rollouts:
        raise ValueError(f"need 0 <= successes <= rollouts; got {successes} of {rollouts}")
    if not 0.0 < q < 1.0 or not strength > 0.0:
        raise ValueError(f"need 0 < q < 1 and strength > 0; got q={q!r}, strength={strength!r}")
    return successes + strength * q, rollouts - successes + strength * (1.0 - q)


def beta_moment(a: float, b: float, power: int) -> float:
    """E[p^G] for p ~ Beta(a, b): prod_{i<G} (a + i) / (a + b + i)."""
    if not (a > 0.0 and b > 0.0):
        raise ValueError(f"Beta(a, b) needs a > 0 and b > 0; got a={a!r}, b={b!r}")
    if isinstance(power, bool) or not isinstance(power, int) or power < 0:
        raise ValueError(f"power must be an integer >= 0; got {power!r}")
    moment = 1.0
    for i in range(power):
        moment *= (a + i) / (a + b + i)
    return moment


def group_learnability(a: float, b: float, group_size: int) -> float:
    """L = 1 - E[p^G] - E[(1 - p)^G]: the probability, under p ~ Beta(a, b), that G
    rollouts are neither all successes nor all failures. In [0, 1); 0 for G = 1."""
    untied = 1.0 - beta_moment(a, b, group_size) - beta_moment(b, a, group_size)
    return max(0.0, untied)  # a near-certain state can round a hair below 0


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
    """U = c sqrt(ln(1 + N) / (1 + n_s)): grows slowly with N, every rollout the buffer
    ever counted (evicted states' included, so evicting does not shrink it), shrinks
    as the state itself is tried, so rarely tried states get their turn."""
    if total_rollouts < 0 or state_rollouts < 0:
        raise ValueError("rollout counts must be >= 0")
    return c * math.sqrt(math.log1p(total_rollouts) / (1 + state_rollouts))


def learnability_potential(L: float, U: float, H: float, gamma: float) -> float:
    """LP = (L + U) H^gamma (0^0 = 1: gamma = 0 ignores headroom entirely)."""
    return (L + U) * H**gamma


def is_success(stage: str, outcome: str, reward: float, improve_neutral: float, kind: str = "improve") -> bool:
    """Success is a reward above the state's neutral point: for improve, a reward above
    `improve_neutral` (a valid run that beat the state's best); for draft and debug,
    any valid submission. `kind` "valid" (LearnabilityConfig.success): any valid
    submission on every stage."""
    if kind not in SUCCESS_KINDS:
        raise ValueError(f"success kind {kind!r}: expected {' or '.join(SUCCESS_KINDS)} (LearnabilityConfig.success)")
    if stage == "improve" and kind == "improve":
        return outcome == "valid" and reward > improve_neutral
    return outcome == "valid"


def peer_pools(states: Iterable[StateStats]) -> dict[tuple[str, str], tuple[int, int]]:
    """(S_tg, N_tg) per (task, stage): the successes and rollouts of `states` (the live
    states) pooled by task and stage; the prior of each of them."""
    pools: dict[tuple[str, str], tuple[int, int]] = {}
    for s in states:
        k, n = pools.get((s.task_id, s.stage), (0, 0))
        pools[(s.task_id, s.stage)] = (k + s.successes, n + s.rollouts)
    return pools


@dataclass(frozen=True)
class Potential:
    """Every term of one state's LP, for logging and `buffer show`. `p` is the mean
    success probability (the posterior's a / (a + b)), `q` the prior's mean (the
    peers' pooled rate; 1/2 for the laplace and variance variants)."""

    p: float
    L: float
    U: float
    H: float
    LP: float
    q: float

    def to_dict(self) -> dict[str, float]:
        return asdict(self)


def state_potential(
    stats: StateStats,
    total_rollouts: int,
    reference: TaskReference | None,
    config: LearnabilityConfig,
    *,
    peers: tuple[int, int],
) -> Potential:
    """The LP of one state given N (`total_rollouts`), its task's references and its
    peers' pooled (successes, rollouts) (`peer_pools`; the beta variant's prior)."""
    if config.variant == "beta":
        q = pooled_rate(*peers)
        a, b = beta_posterior(stats.successes, stats.rollouts, q, config.prior_strength)
        p = a / (a + b)
        L = group_learnability(a, b, config.group_size)
    else:
        q = 0.5
        p = success_probability(stats.successes, stats.rollouts)
        if config.variant == "variance":
            L = variance_learnability(stats.last_rewards, config.variance_prior_weight)
        else:
            L = learnability(p)
    U = exploration(total_rollouts, stats.rollouts, config.exploration_c)
    top = reference.top if reference else None
    baseline = reference.baseline if reference else None
    H = headroom(stats.best_score, top, baseline)
    return Potential(p, L, U, H, learnability_potential(L, U, H, config.headroom_gamma), q)


def potentials(
    states: Sequence[StateStats],
    total_rollouts: int,
    tasks: Mapping[str, TaskReference],
    config: LearnabilityConfig,
) -> list[Potential]:
    """The LP of each of `states`, in order, with the priors pooled over `states` (pass
    every live state: a state's peers are all of them)."""
    pools = peer_pools(states)
    return [
        state_potential(s, total_rollouts, tasks.get(s.task_id), config, peers=pools[(s.task_id, s.stage)])
        for s in states
    ]


def snapshot_potentials(snapshot: BufferSnapshot, config: LearnabilityConfig) -> list[Potential]:
    """The LP of every state of a snapshot, in the snapshot's order."""
    return potentials(snapshot.states, snapshot.total_rollouts, snapshot.tasks, config)
