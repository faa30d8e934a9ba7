"""The curriculum's configuration: one dataclass per component, defaults are the source of truth.

The constants of the Learnability Potential are ours (AceGRPO names the idea,
not a formula); `benchmarks/curriculum.py` is where a change to them is
measured against the uniform baseline.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from mleforge import config as check
from mleforge.errors import ConfigError

LP_VARIANTS = ("beta", "laplace", "variance")
SUCCESS_KINDS = ("improve", "valid")
SAMPLER_KINDS = ("uniform", "learnability")
SYNCHRONOUS_MODES = ("FULL", "NORMAL", "EXTRA")


def _number(section: str, key: str, value: Any, *, low: float | None = None, strict: bool = False) -> None:
    """Reject non-numbers, NaN and infinities, and values below `low` (or at it when strict)."""
    check.number(f"{section}.{key}", value, low=low, strict=strict)


def _integer(section: str, key: str, value: Any, *, low: int, optional: bool = False) -> None:
    check.integer(f"{section}.{key}", value, low, optional=optional)


class _Config:
    def to_dict(self) -> dict[str, Any]:
        return asdict(self)  # type: ignore[call-overload]

    @classmethod
    def from_dict(cls, data: dict[str, Any]):
        check.known(cls, data)
        return cls(**data)


@dataclass(frozen=True)
class LearnabilityConfig(_Config):
    """Constants of the Learnability Potential LP = (L + U) * H^gamma (DESIGN.md, Curriculum).

    variant = "beta": a state's success probability p ~ Beta(k + m q, n - k + m (1 - q)),
    q the pooled success rate of its task and stage, and L = 1 - E[p^G] - E[(1 - p)^G],
    the probability that a group of G rollouts is not all tied. "laplace" is the
    earlier definition, p = (k + 1) / (n + 2) and L = p (1 - p), measured with
    headroom_gamma = 1 (set both to get it back); "variance" uses the variance of
    the state's last K rewards, shrunk towards 0.25 (laplace's L of an untried
    state) with the weight of `variance_prior_weight` pseudo-rollouts, which sees
    ties among valid rewards as well.
    group_size = 8: G, the trainer's GRPO group (its num_generations; the sampler
    checks that its own group size agrees). A group of one always ties: G >= 2.
    prior_strength = 2: m, how many rollouts the peers' rate is worth. Small: two
    rollouts of the state itself already weigh as much as all of its peers, yet an
    untried state is not a coin flip where its peers are known to fail or succeed.
    exploration_c = 0.1: U = c * sqrt(ln(1 + N) / (1 + n_s)), N every rollout ever
    counted. With N = 1000 an untried state gets U = 0.26, and 0.09 once tried for
    a group of 8. L spans [0, 1) (G = 8: an untried state has L = 0.78 when its
    peers' rate is 1/2, 0.31 when it is 1/10; a state measured at 8 of 16 has
    0.98), so U lifts untried and rarely tried states without overruling L.
    headroom_gamma = 0: H is ignored. A state near the top already has a low L
    (it keeps succeeding), and H = 1 for every state with no valid score pulled
    sampling toward failure chains; 1 scales LP by H linearly.
    improve_neutral = 0.5: the reward of a valid improve run that does not
    change the score (with the default RewardConfig); success on an improve
    state is a reward above it. Change it with the reward's bonuses.
    success = "improve": what a success is, and so what L counts. "improve": a
    valid submission on a draft or debug state, a valid run that beat the
    state's best on an improve state. "valid": a valid submission on every
    stage, so that L is the probability that a group mixes valid and failed
    runs, the reward's largest gap (a failure earns -0.3 to -0.1, a valid run
    0 or more). A buffer keeps the kind it was made with (the success of each
    rollout is stored as it is counted); another is refused on reopening.
    """

    exploration_c: float = 0.1
    headroom_gamma: float = 0.0
    improve_neutral: float = field(default=0.5, metadata={"flag": False})  # a run: its reward's neutral
    variant: str = "beta"
    variance_prior_weight: float = 2.0
    prior_strength: float = 2.0
    group_size: int = field(default=8, metadata={"flag": False})  # a run: its GRPO group
    success: str = "improve"

    def __post_init__(self) -> None:
        s = "learnability"
        _number(s, "exploration_c", self.exploration_c, low=0.0)
        _number(s, "headroom_gamma", self.headroom_gamma, low=0.0)
        _number(s, "improve_neutral", self.improve_neutral)
        _number(s, "variance_prior_weight", self.variance_prior_weight, low=0.0)
        # m = 0 would leave an untried state's Beta(0, 0) undefined.
        _number(s, "prior_strength", self.prior_strength, low=0.0, strict=True)
        if isinstance(self.group_size, bool) or not isinstance(self.group_size, int) or self.group_size < 2:
            raise ConfigError(
                f"{s}.group_size: got {self.group_size!r}; expected an integer >= 2, the trainer's GRPO group "
                "(num_generations): a group of one rollout always ties"
            )
        if self.variant not in LP_VARIANTS:
            raise ConfigError(f"{s}.variant: got {self.variant!r}; expected one of {', '.join(LP_VARIANTS)}")
        if self.success not in SUCCESS_KINDS:
            raise ConfigError(f"{s}.success: got {self.success!r}; expected one of {', '.join(SUCCESS_KINDS)} "
                              "(improve: an improve state's success is beating its best; valid: any valid run)")

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LearnabilityConfig:
        # Buffers made before the beta variant stored the laplace variant as "binary".
        if data.get("variant") == "binary":
            data = {**data, "variant": "laplace"}
        return super().from_dict(data)


@dataclass(frozen=True)
class SamplerConfig(_Config):
    """How the next states are drawn.

    kind: "learnability" draws with probability (1 - epsilon) * softmax(LP / tau)
    + epsilon / |states|; "uniform" is the baseline.
    tau = 0.05: each 0.05 of LP is a factor e. L spans [0, 1): before U and the
    epsilon floor, a frontier state measured at 8 of 16 (L = 0.98 for G = 8) is
    e^4 = 55 times likelier than an untried state of a coin-flip task (0.78), and
    a solved or hopeless state (L near 0) is left to the floor.
    epsilon = 0.1: one draw in ten ignores LP, so every state keeps being
    measured and a wrong LP cannot starve a state for ever.
    group_size: G, the GRPO group: each chosen state appears G times in a row.
    with_replacement = False: the groups of one step are distinct states while
    there are enough of them (more distinct prompts per gradient step).
    """

    kind: str = "learnability"
    group_size: int = field(default=8, metadata={"flag": False})  # a run: its GRPO group
    tau: float = 0.05
    epsilon: float = 0.1
    with_replacement: bool = False
    seed: int = field(default=0, metadata={"flag": False})  # a run: its seed

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
