"""Medal and median thresholds by MLE-bench's rules (after kaggle.com/progression).

With N teams on the leaderboard (sorted best first), the score at position p
(1-based) is the threshold:

    N < 100:          gold p = max(1, int(0.1 N)), silver max(1, int(0.2 N)), bronze max(1, int(0.4 N))
    100 <= N < 250:   gold p = 10, silver int(0.2 N), bronze int(0.4 N)
    250 <= N < 1000:  gold p = 10 + int(0.002 N), silver 50, bronze 100
    N >= 1000:        gold p = 10 + int(0.002 N), silver int(0.05 N), bronze int(0.1 N)

The median threshold is the median of all scores. A medal is earned by a score
at least as good as its threshold (the best medal only); above_median is strict.
A nan score earns nothing (every comparison with nan is false, as in MLE-bench).

MLE-bench reads the positions off its leaderboard file as it stands (`presorted`);
our own leaderboards are sorted best first here, whatever their order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np


@dataclass(frozen=True)
class Thresholds:
    gold: float
    silver: float
    bronze: float
    median: float


@dataclass(frozen=True)
class RankInfo:
    gold_medal: bool
    silver_medal: bool
    bronze_medal: bool
    above_median: bool
    gold_threshold: float
    silver_threshold: float
    bronze_threshold: float
    median_threshold: float

    @property
    def any_medal(self) -> bool:
        return self.gold_medal or self.silver_medal or self.bronze_medal

    def to_dict(self) -> dict:
        return asdict(self)


def medal_positions(num_teams: int) -> tuple[int, int, int]:
    """The 1-based leaderboard positions of the gold, silver and bronze thresholds."""
    n = num_teams
    if n < 1:
        raise ValueError("a leaderboard needs at least one entry")
    if n < 100:
        return max(1, int(n * 0.1)), max(1, int(n * 0.2)), max(1, int(n * 0.4))
    if n < 250:
        return 10, max(1, int(n * 0.2)), max(1, int(n * 0.4))
    if n < 1000:
        return 10 + int(n * 0.002), 50, 100
    return 10 + int(n * 0.002), max(1, int(n * 0.05)), max(1, int(n * 0.1))


def sort_best_first(scores: Sequence[float], is_lower_better: bool) -> np.ndarray:
    values = np.asarray(scores, dtype=float)
    order = np.argsort(values if is_lower_better else -values, kind="stable")
    return values[order]


def thresholds(scores: Sequence[float], is_lower_better: bool, presorted: bool = False) -> Thresholds:
    """Thresholds for a leaderboard's scores (sorted best first here unless `presorted`)."""
    ranked = np.asarray(scores, dtype=float) if presorted else sort_best_first(scores, is_lower_better)
    gold, silver, bronze = medal_positions(len(ranked))
    return Thresholds(
        gold=float(ranked[gold - 1]),
        silver=float(ranked[silver - 1]),
        bronze=float(ranked[bronze - 1]),
        median=float(np.median(ranked)),
    )


def rank_score(
    score: float | None, scores: Sequence[float], is_lower_better: bool, presorted: bool = False
) -> RankInfo:
    """Medals and above-median for `score` against a leaderboard; None (invalid) earns nothing."""
    t = thresholds(scores, is_lower_better, presorted)

    if score is None:
        return RankInfo(False, False, False, False, t.gold, t.silver, t.bronze, t.median)

    def at_least(threshold: float) -> bool:
        return score <= threshold if is_lower_better else score >= threshold

    gold = at_least(t.gold)
    silver = not gold and at_least(t.silver)
    bronze = not gold and not silver and at_least(t.bronze)
    above = score < t.median if is_lower_better else score > t.median
    return RankInfo(gold, silver, bronze, above, t.gold, t.silver, t.bronze, t.median)
