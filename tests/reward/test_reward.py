"""The reward module against hand-computed values, for both metric directions and every case."""

from __future__ import annotations

import math

import pytest

from mleforge.errors import ConfigError
from mleforge.reward import (
    RewardBreakdown,
    RewardConfig,
    classify_outcome,
    compute_reward,
    improvement_delta,
    medal_of,
    position_score,
    reference_score,
    sigmoid,
    task_scale,
)

SIGMOID_3 = 0.9525741268224334  # 1 / (1 + e^-3)
SIGMOID_MINUS_3 = 0.04742587317756678
SIGMOID_30 = 0.9999999999999065
SIGMOID_MINUS_30 = 9.357622968839299e-14
# N = 10, best first when higher is better.
BOARD = [0.95, 0.9, 0.88, 0.85, 0.8, 0.78, 0.75, 0.7, 0.6, 0.5]


def test_sigmoid():
    assert sigmoid(0) == 0.5
    assert sigmoid(3) == pytest.approx(SIGMOID_3, abs=1e-15)
    assert sigmoid(-3) == pytest.approx(SIGMOID_MINUS_3, abs=1e-15)
    assert sigmoid(-1000) == 0.0 and sigmoid(1000) == 1.0  # no OverflowError either way


def test_delta_both_directions():
    # (0.85 - 0.80) / 0.05 = 1; lower-is-better flips the sign.
    assert improvement_delta(0.85, 0.80, 0.05, False) == pytest.approx(1.0)
    assert improvement_delta(0.85, 0.80, 0.05, True) == pytest.approx(-1.0)
    assert improvement_delta(0.75, 0.80, 0.05, True) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="scale"):
        improvement_delta(1, 1, 0, False)


@pytest.mark.parametrize("score, lower, expected", [
    (0.85, False, SIGMOID_3),        # better by one scale unit
    (0.75, False, SIGMOID_MINUS_3),  # worse by one
    (0.75, True, SIGMOID_3),         # mirrored: lower is better
    (0.85, True, SIGMOID_MINUS_3),
    (0.80, False, 0.5),              # no change
    (0.80, True, 0.5),
])
def test_valid_reward_hand_computed(score, lower, expected):
    r = compute_reward("valid", score=score, reference=0.80, scale=0.05, is_lower_better=lower)
    assert r.case == "valid" and r.total == pytest.approx(expected, abs=1e-12)
    assert r.base == r.total and r.position is None and r.medal_bonus == 0.0
    assert (r.score, r.reference, r.scale) == (score, 0.80, 0.05)


def test_no_change_earns_exactly_one_half():
    for lower in (False, True):
        r = compute_reward("valid", score=21626.0, reference=21626.0, scale=430.5, is_lower_better=lower)
        assert r.total == 0.5 and r.delta == 0.0


def test_alpha_changes_the_slope():
    # delta = 0.5, alpha = 1: 1 / (1 + e^-0.5)
    r = compute_reward("valid", score=0.825, reference=0.80, scale=0.05, config=RewardConfig(alpha=1.0))
    assert r.total == pytest.approx(0.6224593312018546, abs=1e-12)


def test_delta_is_clipped_and_scale_floored():
    r = compute_reward("valid", score=10.0, reference=0.8, scale=0.05)
    assert r.delta == pytest.approx(184.0) and r.total == pytest.approx(SIGMOID_30, abs=1e-15)
    r = compute_reward("valid", score=-10.0, reference=0.8, scale=0.05)
    assert r.total == pytest.approx(SIGMOID_MINUS_30, rel=1e-9) and r.total > 0
    # scale 0 (a flat leaderboard): the floor 1e-6 applies, (0.81 - 0.8) / 1e-6 = 10000, clipped to 10
    r = compute_reward("valid", score=0.81, reference=0.80, scale=0.0)
    assert r.scale == 1e-6 and r.total == pytest.approx(SIGMOID_30, abs=1e-15)


@pytest.mark.parametrize("case, total", [("execution_error", -0.2), ("timeout", -0.2),
                                         ("invalid_submission", -0.1)])
def test_failures_earn_their_case_reward(case, total):
    assert compute_reward(case) == RewardBreakdown(case=case, total=total)
    config = RewardConfig(r_format=-1.0, r_fail=-0.5, r_invalid=-0.25)
    expected = -0.25 if case == "invalid_submission" else -0.5
    assert compute_reward(case, score=0.9, config=config).total == expected  # a score is ignored


def test_format_error_earns_r_format():
    assert compute_reward("format_error").total == -0.3
    assert compute_reward("format_error", config=RewardConfig(r_format=-1.0, r_fail=-0.5)).total == -1.0


def test_failures_are_ordered_below_every_valid_run():
    # the default order: format error < crash = timeout < invalid submission < the worst valid run
    rewards = [compute_reward(c).total for c in ("format_error", "execution_error", "timeout",
                                                 "invalid_submission")]
    assert rewards == [-0.3, -0.2, -0.2, -0.1]
    lowest = RewardConfig().lowest_valid_reward
    assert lowest == pytest.approx(SIGMOID_MINUS_30, rel=1e-9) and lowest > -0.1


def test_valid_floor_lifts_every_valid_reward():
    # floor 0.4: valid = 0.4 + 0.6 * sigmoid(3 * delta); no change -> 0.4 + 0.3 = 0.7
    config = RewardConfig(r_format=0.0, r_fail=0.1, r_invalid=0.2, valid_floor=0.4)
    assert config.neutral_reward == pytest.approx(0.7)
    same = compute_reward("valid", score=0.8, reference=0.8, scale=0.1, config=config)
    assert same.base == 0.5 and same.total == pytest.approx(0.7)
    # delta = (0.9 - 0.8) / 0.1 = 1: sigmoid(3) = 0.95257413, total 0.4 + 0.6 * 0.95257413 = 0.97154448
    up = compute_reward("valid", score=0.9, reference=0.8, scale=0.1, config=config)
    assert up.total == pytest.approx(0.97154448, abs=1e-8)
    worst = compute_reward("valid", score=-1e9, reference=0.8, scale=1e-9, config=config)
    assert worst.total == pytest.approx(0.4 + 0.6 * SIGMOID_MINUS_30) and worst.total > 0.2


def test_any_valid_run_beats_any_failure():
    for config in (RewardConfig(), RewardConfig(alpha=10.0, delta_clip=50.0), RewardConfig(r_format=-0.2, r_fail=-0.1),
                   RewardConfig(r_format=0.0, r_fail=0.1, r_invalid=0.3, valid_floor=0.3 + 1e-9)):
        failures = [compute_reward(c, config=config).total for c in
                    ("format_error", "execution_error", "timeout", "invalid_submission")]
        for lower in (False, True):
            worst = compute_reward("valid", score=1e9 if lower else -1e9, reference=0.8, scale=1e-9,
                                   is_lower_better=lower, config=config)
            assert worst.total > max(failures)


def test_valid_needs_its_inputs():
    with pytest.raises(ValueError, match="needs reference, scale"):
        compute_reward("valid", score=0.8)
    with pytest.raises(ValueError, match="finite"):
        compute_reward("valid", score=0.8, reference=float("nan"), scale=0.1)


@pytest.mark.parametrize("score", [float("nan"), float("inf"), -float("inf"), None, "0.9", True])
def test_a_valid_case_without_a_finite_score_earns_the_invalid_reward(score):
    # What a grade report can hold (an mlebench: grader's valid nan) is never refused (issue 31).
    config = RewardConfig()
    r = compute_reward("valid", score=score, reference=0.8, scale=0.1, config=config)
    assert r.case == "invalid_submission" and r.total == config.failure_reward("invalid_submission")
    with pytest.raises(ValueError, match="case must be"):
        compute_reward("crashed")


def test_task_scale_gold_median():
    # N = 10 < 100: gold is position max(1, int(0.1 * 10)) = 1; the median is (0.8 + 0.78) / 2 = 0.79.
    assert task_scale(BOARD, False) == pytest.approx(0.95 - 0.79)
    # Lower is better: gold is the lowest score, 0.5; |0.5 - 0.79| = 0.29.
    assert task_scale(BOARD, True) == pytest.approx(0.29)


def test_task_scale_falls_back_to_std_then_floor():
    # gold = median = 1.0; std of (1, 1, 1, 0): mean 0.75, variance (3 * 0.0625 + 0.5625) / 4 = 0.1875
    assert task_scale([1.0, 1.0, 1.0, 0.0], False) == pytest.approx(math.sqrt(0.1875))
    assert task_scale([0.5] * 5, False) == 0.0
    assert task_scale([0.5] * 5, False, floor=1e-6) == 1e-6
    assert RewardConfig().task_scale([0.5] * 5, True) == 1e-6
    # std source: mean 0.771, sum of squared deviations 0.17589
    assert task_scale(BOARD, False, source="std") == pytest.approx(math.sqrt(0.017589))
    assert RewardConfig(scale_source="std").task_scale(BOARD, False) == pytest.approx(math.sqrt(0.017589))
    with pytest.raises(ValueError):
        task_scale([], False)


def test_position_score():
    board = [0.9, 0.85, 0.8, 0.7]  # N = 4
    assert position_score(0.95, board, False) == 1.0   # p = 1: (4 - 1 + 1) / 4
    assert position_score(0.85, board, False) == 0.75  # ties share the position: p = 2
    assert position_score(0.82, board, False) == 0.5   # p = 3
    assert position_score(0.6, board, False) == 0.0    # worse than all: p = 5
    assert position_score(0.8, board, True) == 0.75    # lower is better: only 0.7 is better, p = 2
    assert position_score(0.95, board, True) == 0.0


def test_position_term_and_medal_bonus_compose():
    board = [0.9, 0.85, 0.8, 0.7]
    config = RewardConfig(position_weight=0.5, medal_bonus_gold=0.2, medal_bonus_silver=0.1)
    r = compute_reward("valid", score=0.85, reference=0.80, scale=0.05, config=config,
                       leaderboard_scores=board, medal="gold")
    assert r.position == 0.75 and r.position_term == 0.375 and r.medal_bonus == 0.2
    assert r.total == pytest.approx(SIGMOID_3 + 0.375 + 0.2, abs=1e-12)
    assert r.to_dict()["medal"] == "gold" and RewardBreakdown.from_dict(r.to_dict()) == r
    with pytest.raises(ValueError, match="leaderboard"):
        compute_reward("valid", score=0.85, reference=0.8, scale=0.05, config=config)


def test_medal_of():
    # N = 10: gold position 1 (0.95), silver 2 (0.9), bronze 4 (0.85)
    assert [medal_of(s, BOARD, False) for s in (0.96, 0.9, 0.86, 0.8, None)] == ["gold", "silver", "bronze", None, None]
    assert medal_of(0.5, BOARD, True) == "gold"


def test_classify_outcome_order():
    assert classify_outcome(format_ok=False, valid_submission=True) == "format_error"
    assert classify_outcome(format_ok=True, timed_out=True, killed_by="timeout", valid_submission=True) == "timeout"
    assert classify_outcome(format_ok=True, returncode=1, valid_submission=True) == "execution_error"
    assert classify_outcome(format_ok=True, returncode=None, killed_by="memory") == "execution_error"
    assert classify_outcome(format_ok=True, returncode=0) == "invalid_submission"
    assert classify_outcome(format_ok=True, returncode=0, valid_submission=True) == "valid"


def test_reference_score():
    assert reference_score("improve", baseline=0.62, best_score=0.8) == 0.8
    assert reference_score("draft", baseline=0.62, best_score=0.8) == 0.62
    assert reference_score("debug", baseline=0.62, best_score=None) == 0.62
    with pytest.raises(ValueError):
        reference_score("explore", baseline=0.0, best_score=None)


@pytest.mark.parametrize("kwargs, message", [
    ({"alpha": 0.0}, "reward.alpha"),
    ({"alpha": -1.0}, "reward.alpha"),
    ({"alpha": float("nan")}, "expected a number"),
    ({"alpha": float("inf")}, "finite"),
    ({"r_fail": True}, "expected a number"),
    ({"delta_clip": 0.0}, "delta_clip"),
    ({"scale_source": "iqr"}, "scale_source"),
    ({"scale_floor": 0.0}, "scale_floor"),
    ({"position_weight": -0.1}, "position_weight"),
    ({"medal_bonus_gold": -1.0}, "medal_bonus_gold"),
    ({"r_format": 0.1}, "r_format .* > reward.r_fail"),
    ({"r_fail": 0.1, "r_format": 0.0}, "r_fail .* > reward.r_invalid"),
    ({"r_invalid": 0.1}, "any valid submission beats any failure"),
    ({"r_format": 0.0, "r_fail": 0.1, "r_invalid": 0.25, "valid_floor": 0.2}, "raise valid_floor"),
    ({"valid_floor": 1.0}, "valid_floor"),
    ({"valid_floor": -0.1}, "valid_floor"),
])
def test_config_rejects_bad_values(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        RewardConfig(**kwargs)


def test_config_round_trip_and_medal_names():
    config = RewardConfig(alpha=2.0, position_weight=0.25)
    assert RewardConfig.from_dict(config.to_dict()) == config
    with pytest.raises(ValueError, match="medal"):
        config.medal_bonus("platinum")
