"""The reward's pure pieces: each takes plain numbers and returns one.

Nothing here knows prompts, states, files or tasks; `mleforge.reward.reward`
composes these into a `RewardBreakdown`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from mleforge.grading.medals import rank_score, thresholds

# The kinds of outcome one action can have, worst first. Each has its own reward case.
CASES = ("format_error", "execution_error", "timeout", "invalid_submission", "valid")
FAILURE_CASES = ("execution_error", "timeout", "invalid_submission")
STAGES = ("draft", "debug", "improve")


def sigmoid(x: float) -> float:
    """1 / (1 + e^-x), written so that neither branch overflows for large |x|."""
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    z = math.exp(x)
    return z / (1.0 + z)


def classify_outcome(
    *,
    format_ok: bool,
    timed_out: bool = False,
    returncode: int | None = None,
    killed_by: str | None = None,
    valid_submission: bool = False,
) -> str:
    """The reward case of one action, from what happened to it.

    Checked in this order: no parsable action; the run hit its time limit (even
    if it wrote a file on the way, the file may be partial); the run crashed
    or was killed (a non-zero exit, or killed by a limit); the submission is
    missing or invalid; else valid. A script that writes a valid submission and
    then crashes is an execution error: the run failed, and rewarding it would
    teach that a crash at the end does not matter.
    """
    if not format_ok:
        return "format_error"
    if timed_out:
        return "timeout"
    if killed_by is not None or returncode != 0:
        return "execution_error"
    if not valid_submission:
        return "invalid_submission"
    return "valid"


def reference_score(stage: str, *, baseline: float | None, best_score: float | None) -> float | None:
    """The score a valid run is compared with: the state's best valid score when
    improving, the task's baseline (the sample submission's score) when drafting
    or debugging, as there is no valid score to beat yet."""
    if stage not in STAGES:
        raise ValueError(f"stage must be one of {', '.join(STAGES)}; got {stage!r}")
    return best_score if stage == "improve" else baseline


def improvement_delta(score: float, reference: float, scale: float, is_lower_better: bool) -> float:
    """delta = sign * (score - reference) / scale, sign = +1 when higher is better.

    Positive means better than the reference, in units of the task's spread.
    """
    if not scale > 0:
        raise ValueError(f"scale must be > 0; got {scale!r}")
    sign = -1.0 if is_lower_better else 1.0
    return sign * (score - reference) / scale


def task_scale(
    leaderboard_scores: Sequence[float],
    is_lower_better: bool,
    source: str = "gold_median",
    floor: float = 0.0,
) -> float:
    """A task's spread, the unit of delta, from its leaderboard.

    `gold_median`: |gold threshold - median| (MLE-bench's thresholds), which
    measures how much better than typical a medal-worthy score is; when the two
    coincide (a small or flat leaderboard) it falls back to the standard
    deviation of the scores (population, ddof = 0). `std`: that standard
    deviation directly. The result is at least `floor`.
    """
    scores = np.asarray(leaderboard_scores, dtype=float)
    if scores.size == 0 or not np.all(np.isfinite(scores)):
        raise ValueError("a leaderboard needs at least one score, all finite")
    if source not in ("gold_median", "std"):
        raise ValueError(f"source must be gold_median or std; got {source!r}")
    std = float(np.std(scores))
    if source == "std":
        spread = std
    else:
        t = thresholds(scores, is_lower_better)
        spread = abs(t.gold - t.median) or std
    return max(spread, floor)


def position_score(score: float, leaderboard_scores: Sequence[float], is_lower_better: bool) -> float:
    """MLE-Dojo's position score (N - p + 1) / N.

    N is the number of leaderboard entries and p the 1-based position `score`
    would take among them: 1 + the number of entries strictly better. A tie
    shares the position of the tied entries (Kaggle's "1224" ranking), so
    matching the best entry gives 1.0; being worse than every entry gives
    p = N + 1 and 0.0.
    """
    scores = np.asarray(leaderboard_scores, dtype=float)
    if scores.size == 0:
        raise ValueError("a leaderboard needs at least one score")
    better = scores < score if is_lower_better else scores > score
    n = scores.size
    p = 1 + int(np.count_nonzero(better))
    return (n - p + 1) / n


def medal_of(score: float | None, leaderboard_scores: Sequence[float], is_lower_better: bool) -> str | None:
    """"gold", "silver", "bronze" or None, by MLE-bench's rules (mleforge.grading.medals)."""
    rank = rank_score(score, leaderboard_scores, is_lower_better)
    if rank.gold_medal:
        return "gold"
    if rank.silver_medal:
        return "silver"
    if rank.bronze_medal:
        return "bronze"
    return None
