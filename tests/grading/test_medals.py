"""MLE-bench's medal rules on hand-made leaderboards, for every leaderboard-size range."""

import pytest

from mleforge.grading.medals import medal_positions, rank_score, thresholds

# N -> (gold, silver, bronze) positions, computed by hand from the rules.
POSITIONS = {
    5: (1, 1, 2),
    99: (9, 19, 39),
    100: (10, 20, 40),
    249: (10, 49, 99),
    250: (10, 50, 100),
    999: (11, 50, 100),
    1000: (12, 50, 100),
    5000: (20, 250, 500),
}


@pytest.mark.parametrize("n", sorted(POSITIONS))
def test_positions(n):
    assert medal_positions(n) == POSITIONS[n]


def board(n, lower):
    # Distinct scores; position p (best first) holds p when lower is better, n - p + 1 otherwise.
    return [float(p) if lower else float(n - p + 1) for p in range(1, n + 1)]


def at(n, p, lower):
    return float(p) if lower else float(n - p + 1)


def worse(value, lower, step=0.5):
    return value + step if lower else value - step


@pytest.mark.parametrize("lower", [False, True])
@pytest.mark.parametrize("n", sorted(POSITIONS))
def test_at_and_just_past_each_threshold(n, lower):
    gold, silver, bronze = POSITIONS[n]
    scores = board(n, lower)
    t = thresholds(scores, lower)
    assert (t.gold, t.silver, t.bronze) == (at(n, gold, lower), at(n, silver, lower), at(n, bronze, lower))
    assert t.median == (n + 1) / 2

    r = rank_score(at(n, gold, lower), scores, lower)
    assert (r.gold_medal, r.silver_medal, r.bronze_medal) == (True, False, False)

    past_gold = rank_score(worse(at(n, gold, lower), lower), scores, lower)
    assert not past_gold.gold_medal
    # Just past gold is silver if the silver threshold is further down, else bronze or nothing.
    if silver > gold:
        assert past_gold.silver_medal
    r = rank_score(at(n, silver, lower), scores, lower)
    assert r.any_medal and (r.silver_medal or r.gold_medal)
    r = rank_score(at(n, bronze, lower), scores, lower)
    assert r.any_medal and not (r.silver_medal and r.gold_medal)
    past_bronze = rank_score(worse(at(n, bronze, lower), lower), scores, lower)
    assert not past_bronze.any_medal

    # above_median is strict: the median itself is not above it.
    assert not rank_score(t.median, scores, lower).above_median
    better = t.median - 0.25 if lower else t.median + 0.25
    assert rank_score(better, scores, lower).above_median


def test_exact_medal_for_small_board():
    # N=5, higher better: scores 5,4,3,2,1: gold/silver at 5 (position 1), bronze at 4.
    scores = [5.0, 4.0, 3.0, 2.0, 1.0]
    assert rank_score(5.0, scores, False).gold_medal
    r = rank_score(4.5, scores, False)
    assert (r.gold_medal, r.silver_medal, r.bronze_medal) == (False, False, True)
    assert not rank_score(3.9, scores, False).any_medal
    assert rank_score(3.1, scores, False).above_median and not rank_score(3.0, scores, False).above_median


def test_order_of_leaderboard_file_does_not_matter():
    scores = [3.0, 1.0, 5.0, 2.0, 4.0]
    assert thresholds(scores, False) == thresholds(sorted(scores, reverse=True), False)


def test_invalid_score_earns_nothing():
    r = rank_score(None, [1.0, 2.0], False)
    assert not (r.any_medal or r.above_median)
    assert r.gold_threshold == 2.0


def test_empty_leaderboard_is_an_error():
    with pytest.raises(ValueError):
        medal_positions(0)
