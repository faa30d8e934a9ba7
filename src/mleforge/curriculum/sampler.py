"""Samplers: which states the next GRPO step trains on.

Both samplers share one protocol and one drawing routine; they differ only in
the probabilities. A batch is `n_groups` states, each repeated `group_size`
times in a row (the GRPO group layout trainers expect).

Same batch on every rank: the draw is a pure function of (snapshot, seed,
step). The generator is `numpy.random.default_rng([seed, step])`, and the
snapshot for step t is `buffer.snapshot(t - 1)`, which every rank reads
identically (see mleforge.curriculum.buffer), sorted by state_id. Nothing is
written while sampling: statistics change only through the step's feedback.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from mleforge.agent.state import State
from mleforge.curriculum.buffer import StateBuffer
from mleforge.curriculum.config import LearnabilityConfig, SamplerConfig
from mleforge.curriculum.errors import CurriculumError
from mleforge.curriculum.learnability import snapshot_potentials
from mleforge.curriculum.records import BufferSnapshot
from mleforge.errors import ConfigError


@dataclass(frozen=True)
class SampledBatch:
    """One step's draw: `groups[i]` is the state of group i, drawn with `probabilities[i]`."""

    step: int
    as_of: int
    group_size: int
    groups: tuple[str, ...]
    probabilities: tuple[float, ...]

    @property
    def state_ids(self) -> tuple[str, ...]:
        """The trainer's layout: each group's state id `group_size` times in a row."""
        return tuple(sid for sid in self.groups for _ in range(self.group_size))


class Sampler(Protocol):
    name: str
    config: SamplerConfig

    def probabilities(self, snapshot: BufferSnapshot) -> np.ndarray:
        """One probability per snapshot state, in the snapshot's order; they sum to 1."""
        ...

    def sample(self, snapshot: BufferSnapshot, step: int, n_groups: int) -> SampledBatch:
        ...


def draw(probs: np.ndarray, snapshot: BufferSnapshot, step: int, n_groups: int, config: SamplerConfig) -> SampledBatch:
    """Draw `n_groups` states of `snapshot` with `probs`, reproducibly from (seed, step).

    Without replacement while enough states have non-zero probability (distinct
    prompts per step), with replacement otherwise (a buffer smaller than a batch).
    """
    if step < 0:
        raise CurriculumError(f"training steps start at 0; got {step}")
    if n_groups < 1:
        raise CurriculumError(f"n_groups must be >= 1; got {n_groups}")
    if not len(snapshot):
        raise CurriculumError(
            f"the buffer holds no states as of step {snapshot.as_of}; seed it first "
            "(mleforge.curriculum.seeds) and seal the set-up step"
        )
    rng = np.random.default_rng([config.seed, step])
    replace = config.with_replacement or np.count_nonzero(probs) < n_groups
    chosen = rng.choice(len(probs), size=n_groups, replace=replace, p=probs)
    ids = snapshot.state_ids
    return SampledBatch(
        step=step, as_of=snapshot.as_of, group_size=config.group_size,
        groups=tuple(ids[i] for i in chosen), probabilities=tuple(float(probs[i]) for i in chosen),
    )


class UniformSampler:
    """The baseline: every state of the snapshot equally likely."""

    name = "uniform"

    def __init__(self, config: SamplerConfig | None = None):
        self.config = config or SamplerConfig(kind="uniform")

    def probabilities(self, snapshot: BufferSnapshot) -> np.ndarray:
        n = len(snapshot)
        return np.full(n, 1.0 / n) if n else np.zeros(0)

    def sample(self, snapshot: BufferSnapshot, step: int, n_groups: int) -> SampledBatch:
        return draw(self.probabilities(snapshot), snapshot, step, n_groups, self.config)


def mixed_softmax(potentials: np.ndarray, tau: float, epsilon: float) -> np.ndarray:
    """(1 - epsilon) * softmax(potentials / tau) + epsilon / n."""
    n = len(potentials)
    if not n:
        return np.zeros(0)
    z = np.asarray(potentials, dtype=float) / tau
    weights = np.exp(z - z.max())  # shifted: exp of large LP / tau would overflow
    return (1.0 - epsilon) * weights / weights.sum() + epsilon / n


class LearnabilitySampler:
    """AceGRPO's adaptive sampling: probability proportional to exp(LP / tau), mixed
    with an epsilon uniform floor.

    The beta variant's L is about groups of `learnability.group_size` rollouts, so
    that must be the group this sampler lays out (`config.group_size`); without a
    LearnabilityConfig, the default one with this sampler's group size."""

    name = "learnability"

    def __init__(self, config: SamplerConfig | None = None, learnability: LearnabilityConfig | None = None):
        self.config = config or SamplerConfig()
        if learnability is None:
            learnability = LearnabilityConfig(group_size=self.config.group_size)
        if learnability.variant == "beta" and learnability.group_size != self.config.group_size:
            raise ConfigError(
                f"learnability.group_size is {learnability.group_size} but sampler.group_size is "
                f"{self.config.group_size}: the LP would rank states by groups of a size the trainer does not "
                "draw. Set both to the trainer's num_generations (a buffer keeps the LearnabilityConfig it was "
                "created with: pass the new one to StateBuffer, or start a new run directory)"
            )
        self.learnability = learnability

    def probabilities(self, snapshot: BufferSnapshot) -> np.ndarray:
        lp = np.array([p.LP for p in snapshot_potentials(snapshot, self.learnability)], dtype=float)
        return mixed_softmax(lp, self.config.tau, self.config.epsilon)

    def sample(self, snapshot: BufferSnapshot, step: int, n_groups: int) -> SampledBatch:
        return draw(self.probabilities(snapshot), snapshot, step, n_groups, self.config)


def make_sampler(config: SamplerConfig, learnability: LearnabilityConfig | None = None) -> Sampler:
    if config.kind == "uniform":
        return UniformSampler(config)
    return LearnabilitySampler(config, learnability)


def next_batch(
    buffer: StateBuffer, sampler: Sampler, step: int, n_groups: int, *, wait_s: float = 0.0
) -> tuple[SampledBatch, list[State]]:
    """Training step `step`'s batch from the snapshot of step - 1, and its States in the
    trainer's layout (each group's state `group_size` times in a row). Call it on every
    rank: they all get the same batch. A rank that may get here before the writer has
    committed step - 1 passes `wait_s` (it polls until the step is sealed)."""
    snapshot = buffer.snapshot(step - 1, wait_s=wait_s)
    batch = sampler.sample(snapshot, step, n_groups)
    return batch, buffer.get_states(batch.state_ids)
