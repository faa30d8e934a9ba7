"""Paired comparison of two policies on the same units (states), each sampled at several seeds.

The API (stable: benchmarks/learning.py and the training run's report build on it):

    d = paired_difference(a, b, metric="mean_reward")
        # a, b: {unit: [value at seed 1, value at seed 2, ...]} for policy A and policy B
    d.diff, d.se, d.ci_low, d.ci_high, d.up, d.down, d.tied, d.covers_zero
    PairedDifference.from_dict(d.to_dict()) == d
    t_quantile(0.975, df)     # Student's t quantile, exact for an integer df (no scipy)
    unit_means({unit: values})

The statistics, with the UNIT (a state) as the sample, never a single completion:

1. Each unit's values (one per sampling seed) are averaged first: m_A(i), m_B(i). Seeds of one
   state are not independent draws of the policy's quality on the task distribution (they share
   the state), so counting them as n would understate the standard error.
2. d_i = m_B(i) - m_A(i) for each unit present in both (the units must be the same set: a
   PairingError otherwise).
3. diff = mean of d_i over the n units; se = sample std of d_i (ddof 1) / sqrt(n) (None for
   n < 2); the confidence interval is diff ± t_{(1+c)/2, n-1} * se (Student's t with n - 1
   degrees of freedom; c = 0.95 by default). With n = 1 there is no interval (None).
4. up / down / tied count units with d_i > tol, d_i < -tol, |d_i| <= tol (tol 1e-12: equal
   values up to rounding).

mean_a and mean_b are the means over units of m_A(i) and m_B(i), so diff == mean_b - mean_a
up to rounding. The pairing is what gives the power: a state that is hard for both policies
drops out of d_i, where two independent means would carry its variance twice.

A null control (the same policy against itself at other seeds, or one evaluation's seeds split
in halves) must give an interval that covers 0 about 95% of the time; one that does not, run
after run, says the evaluation is not paired the way it claims.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

TIE_TOL = 1e-12
CONFIDENCE = 0.95


class PairingError(ValueError):
    """Two sets of values that cannot be paired (different units, or a unit with no value)."""


def _t_two_sided(t: float, df: int) -> float:
    """P(|T| < t) for Student's t with an integer df >= 1 (Abramowitz & Stegun 26.7.3-4)."""
    theta = math.atan(t / math.sqrt(df))
    s, c2 = math.sin(theta), math.cos(theta) ** 2
    if df % 2 == 0:
        term = total = 1.0
        for j in range(1, (df - 2) // 2 + 1):
            term *= (2 * j - 1) / (2 * j) * c2
            total += term
        return s * total
    if df == 1:
        return 2.0 * theta / math.pi
    term = total = math.cos(theta)
    for j in range(1, (df - 3) // 2 + 1):
        term *= (2 * j) / (2 * j + 1) * c2
        total += term
    return 2.0 / math.pi * (theta + s * total)


def t_quantile(q: float, df: int) -> float:
    """The q-quantile (0.5 < q < 1) of Student's t with `df` degrees of freedom (an integer
    >= 1), by bisection on the exact distribution function; accurate to about 1e-12."""
    if isinstance(df, bool) or not isinstance(df, int) or df < 1:
        raise ValueError(f"df must be an integer >= 1; got {df!r}")
    if not 0.5 < q < 1.0:
        raise ValueError(f"q must be in (0.5, 1); got {q!r}")
    target = 2.0 * q - 1.0  # P(|T| < t)
    low, high = 0.0, 1.0
    while _t_two_sided(high, df) < target:
        low, high = high, high * 2.0
    for _ in range(200):
        mid = (low + high) / 2.0
        if _t_two_sided(mid, df) < target:
            low = mid
        else:
            high = mid
        if high - low <= 1e-13 * max(1.0, high):
            break
    return (low + high) / 2.0


def unit_means(values: Mapping[str, Sequence[float]]) -> dict[str, float]:
    """Each unit's mean over its values (its seeds); a unit with no value is refused."""
    out = {}
    for unit, vals in values.items():
        if isinstance(vals, (str, bytes)) or not isinstance(vals, Iterable):
            raise PairingError(f"unit {unit!r}: give a list of values, one per seed ({{unit: [value, ...]}}); "
                               f"got {vals!r}")
        try:
            vals = [float(v) for v in vals]
        except (TypeError, ValueError):
            raise PairingError(f"unit {unit!r} has a value that is not a number: {list(vals)} (leave out the seeds "
                               "with no value, as eval.stepwise.state_values does)") from None
        if not vals:
            raise PairingError(f"unit {unit!r} has no values")
        if not all(math.isfinite(v) for v in vals):
            raise PairingError(f"unit {unit!r} has a value that is not a finite number: {vals}")
        out[unit] = math.fsum(vals) / len(vals)
    return out


@dataclass(frozen=True)
class PairedDifference:
    """B - A for one metric, with the unit (state) as the sample (see the module docstring)."""

    metric: str
    n: int  # units paired
    mean_a: float | None
    mean_b: float | None
    diff: float | None  # mean over units of m_B(i) - m_A(i)
    se: float | None  # sample std of the d_i / sqrt(n); None for n < 2
    ci_low: float | None
    ci_high: float | None
    confidence: float = CONFIDENCE
    up: int = 0  # units where B is above A
    down: int = 0
    tied: int = 0

    @property
    def covers_zero(self) -> bool | None:
        """Whether the interval contains 0 (None without an interval)."""
        if self.ci_low is None or self.ci_high is None:
            return None
        return self.ci_low <= 0.0 <= self.ci_high

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PairedDifference:
        return cls(**{k: data[k] for k in ("metric", "n", "mean_a", "mean_b", "diff", "se", "ci_low", "ci_high",
                                            "confidence", "up", "down", "tied")})


def paired_difference(a: Mapping[str, Sequence[float]], b: Mapping[str, Sequence[float]], *, metric: str = "",
                      confidence: float = CONFIDENCE, tie_tol: float = TIE_TOL) -> PairedDifference:
    """B - A over the units of `a` and `b` ({unit: values, one per seed}), which must be the
    same set of units. No units gives n = 0 and Nones."""
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1); got {confidence!r}")
    if set(a) != set(b):
        only_a, only_b = sorted(set(a) - set(b)), sorted(set(b) - set(a))
        raise PairingError(f"the two sides are not the same units: only in A {only_a[:5]}, only in B {only_b[:5]}")
    units = sorted(a)
    if not units:
        return PairedDifference(metric, 0, None, None, None, None, None, None, confidence)
    ma, mb = unit_means(a), unit_means(b)
    d = [mb[u] - ma[u] for u in units]
    n = len(d)
    diff = math.fsum(d) / n
    se = low = high = None
    if n >= 2:
        se = math.sqrt(math.fsum((x - diff) ** 2 for x in d) / (n - 1)) / math.sqrt(n)
        half = t_quantile((1.0 + confidence) / 2.0, n - 1) * se
        low, high = diff - half, diff + half
    return PairedDifference(
        metric=metric, n=n, mean_a=math.fsum(ma.values()) / n, mean_b=math.fsum(mb.values()) / n, diff=diff,
        se=se, ci_low=low, ci_high=high, confidence=confidence, up=sum(x > tie_tol for x in d),
        down=sum(x < -tie_tol for x in d), tied=sum(abs(x) <= tie_tol for x in d))
