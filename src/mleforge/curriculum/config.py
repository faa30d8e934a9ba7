"""The curriculum's configuration: one dataclass per component, defaults are the source of truth.

The constants of the Learnability Potential are ours (AceGRPO names the idea,
not a formula); `benchmarks/curriculum.py` is where a change to them is
measured against the uniform baseline.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import Any

from mleforge.errors import ConfigError

LP_VARIANTS = ("binary", "variance")
SAMPLER_KINDS = ("uniform", "learnability")
SYNCHRONOUS_MODES = ("FULL", "NORMAL", "EXTRA")


def _number(section: str, key: str, value: Any, *, low: float | None = None, strict: bool = False) -> None:
    """Reject non-numbers, NaN and infinities, and values below `low` (or at it when strict)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(f"{section}.{key}: got {value!r}; expected a finite number")
    if low is not None and (value <= low if strict else value < low):
        raise ConfigError(f"{section}.{key}: got {value!r}; expected {'>' if strict else '>='} {low}")


def _integer(section: str, key: str, value: Any, *, low: int, optional: bool = False) -> None:
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ConfigError(f"{section}.{key}: got {value!r}; expected an integer >= {low}")


class _Config:
    def to_dict(self) -> dict[str, Any]:
        return asdict(self)  # type: ignore[call-overload]

    @classmethod
    def from_dict(cls, data: dict[str, Any]):
        known = {f.name for f in fields(cls)}  # type: ignore[arg-type]
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(f"{cls.__name__}: unknown keys {', '.join(unknown)}")
        return cls(**data)


@dataclass(frozen=True)
class LearnabilityConfig(_Config):
    """Constants of the Learnability Potential LP = (L + U) * H^gamma (DESIGN.md, Curriculum).

    exploration_c = 0.1: U = c * sqrt(ln(1 + N) / (1 + n_s)). L is at most 0.25
    (p = 0.5), so with N = 1000 rollouts in the buffer an untried state gets
    U = 0.26, about a frontier state's L, and after one group of 8 rollouts
    U = 0.09: a new state is tried once or twice, then ranked by what its
    rollouts showed. A larger c keeps re-trying states already known to be
    solved or hopeless.
    headroom_gamma = 1.0: H scales LP linearly; 0 ignores headroom, 2 favours
    states far from the top strongly.
    improve_neutral = 0.5: the reward of a valid improve run that does not
    change the score (with the default RewardConfig); success on an improve
    state is a reward above it. Change it with the reward's bonuses.
    variant: "binary" uses L = p (1 - p) from the success counts; "variance"
    uses the variance of the state's last K rewards, shrunk towards 0.25 (the
    binary L of an untried state) with the weight of `variance_prior_weight`
    pseudo-rollouts, which sees ties among valid rewards as well.
    """

    exploration_c: float = 0.1
    headroom_gamma: float = 1.0
    improve_neutral: float = 0.5
    variant: str = "binary"
    variance_prior_weight: float = 2.0

    def __post_init__(self) -> None:
        s = "learnability"
        _number(s, "exploration_c", self.exploration_c, low=0.0)
        _number(s, "headroom_gamma", self.headroom_gamma, low=0.0)
        _number(s, "improve_neutral", self.improve_neutral)
        _number(s, "variance_prior_weight", self.variance_prior_weight, low=0.0)
        if self.variant not in LP_VARIANTS:
            raise ConfigError(f"{s}.variant: got {self.variant!r}; expected one of {', '.join(LP_VARIANTS)}")


@dataclass(frozen=True)
class SamplerConfig(_Config):
    """How the next states are drawn.

    kind: "learnability" draws with probability (1 - epsilon) * softmax(LP / tau)
    + epsilon / |states|; "uniform" is the baseline.
    tau = 0.05: LP differences that matter are a few hundredths (L ranges over
    [0, 0.25]), so a frontier state (L = 0.25) is e^5 = 148 times likelier than
    a solved one (L near 0) before the epsilon floor.
    epsilon = 0.1: one draw in ten ignores LP, so every state keeps being
    measured and a wrong LP cannot starve a state for ever.
    group_size: G, the GRPO group: each chosen state appears G times in a row.
    with_replacement = False: the groups of one step are distinct states while
    there are enough of them (more distinct prompts per gradient step).
    """

    kind: str = "learnability"
    group_size: int = 8
    tau: float = 0.05
    epsilon: float = 0.1
    with_replacement: bool = False
    seed: int = 0

    def __post_init__(self) -> None:
        s = "sampler"
        if self.kind not in SAMPLER_KINDS:
            raise ConfigError(f"{s}.kind: got {self.kind!r}; expected one of {', '.join(SAMPLER_KINDS)}")
        _integer(s, "group_size", self.group_size, low=1)
        _number(s, "tau", self.tau, low=0.0, strict=True)
        _number(s, "epsilon", self.epsilon, low=0.0)
        if self.epsilon > 1:
            raise ConfigError(f"{s}.epsilon: got {self.epsilon}; expected a probability in [0, 1]")
        if not isinstance(self.with_replacement, bool):
            raise ConfigError(f"{s}.with_replacement: got {self.with_replacement!r}; expected true or false")
        _integer(s, "seed", self.seed, low=0)


@dataclass(frozen=True)
class BufferConfig(_Config):
    """Bounds and storage settings of the StateBuffer.

    Bounds count live states, seeds included; seeds are never evicted, so a
    task whose seeds alone exceed its bound keeps them all (and nothing else).
    last_k: how many recent rewards a state keeps (the variance variant, and
    what `buffer show` prints).
    retain_evicted_steps: an evicted state stays on disk (invisible to newer
    snapshots) this many steps before it is deleted, so a rank that reads the
    snapshot of a step a little late still sees the states that step had.
    synchronous = FULL: a commit is fsynced before it returns, so a committed
    training step survives a power loss, not only a killed process (WAL with
    NORMAL already survives SIGKILL). One fsync per training step costs nothing
    next to the minutes a step's rollouts take, and losing a step the trainer's
    checkpoint counts as done would make the two disagree on resume.
    busy_timeout_s: how long a writer waits for another process's write
    transaction before giving up.
    output_max_chars: stdout and stderr kept in a new state's journal (head +
    tail), so the states of long runs do not bloat the buffer.
    """

    max_states_per_task: int | None = 512
    max_states: int | None = 8192
    last_k: int = 16
    retain_evicted_steps: int = 4
    synchronous: str = "FULL"
    busy_timeout_s: float = 60.0
    output_max_chars: int = 8000

    def __post_init__(self) -> None:
        s = "buffer"
        _integer(s, "max_states_per_task", self.max_states_per_task, low=1, optional=True)
        _integer(s, "max_states", self.max_states, low=1, optional=True)
        _integer(s, "last_k", self.last_k, low=1)
        _integer(s, "retain_evicted_steps", self.retain_evicted_steps, low=1)
        _integer(s, "output_max_chars", self.output_max_chars, low=0)
        _number(s, "busy_timeout_s", self.busy_timeout_s, low=0.0)
        if self.synchronous not in SYNCHRONOUS_MODES:
            raise ConfigError(
                f"{s}.synchronous: got {self.synchronous!r}; expected one of {', '.join(SYNCHRONOUS_MODES)} "
                "(OFF is refused: a crash could corrupt the buffer)"
            )
