"""A step's figures: pure functions, checked against hand-computed values."""

from __future__ import annotations

import math

import pytest

from mleforge.train.metrics import (
    component_means,
    entropy,
    frac_no_signal_groups,
    frac_no_valid_groups,
    frac_tied_groups,
    outcome_rates,
    reward_summary,
    step_metrics,
)
from mleforge.train.records import RolloutLine


def line(group, outcome, reward, base=None, delta=None, tokens=10, cached=False):
    components = None if outcome == "lost" else {"base": base, "position_term": 0.0, "medal_bonus": 0.0,
                                                  "delta": delta}
    return RolloutLine(0, 0, group, "r", "s", "titanic", "draft", "c", outcome, reward, components, None, None,
                       cached, tokens)


def test_outcome_rates_are_shares_of_every_rollout():
    rates = outcome_rates(["valid", "valid", "format_error", "lost"])
    assert rates == {"valid_rate": 0.5, "format_error_rate": 0.25, "exec_error_rate": 0.0, "timeout_rate": 0.0,
                     "invalid_submission_rate": 0.0, "lost_rate": 0.25}
    assert set(outcome_rates([]).values()) == {0.0}


def test_reward_summary_leaves_lost_rollouts_out():
    mean, std = reward_summary([0.5, 0.0, None, 1.0])
    assert mean == 0.5 and std == pytest.approx(math.sqrt((0 + 0.25 + 0.25) / 3))  # population std
    assert reward_summary([None, None]) == (None, None)


def test_tied_groups():
    # tied (0.5, 0.5); not tied (0, 1); all lost: left out; one scored reward: tied
    assert frac_tied_groups([[0.5, 0.5], [0.0, 1.0], [None, None], [None, 0.3]]) == pytest.approx(2 / 3)
    assert frac_tied_groups([[None]]) is None


def test_groups_with_no_valid_rollout_and_groups_with_no_signal():
    outcomes = [["valid", "valid"], ["valid", "format_error"], ["format_error", "execution_error"], ["lost", "lost"]]
    rewards = [[0.5, 0.5], [0.5, -0.3], [-0.3, -0.2], [None, None]]
    assert frac_no_valid_groups(outcomes) == 0.5  # the failures' group and the lost one
    # tied (group 0), untied failures (2), all lost (3: no scored reward, no valid rollout): 3 of 4
    assert frac_no_signal_groups(rewards, outcomes) == 0.75
    assert frac_no_valid_groups([]) is None and frac_no_signal_groups([], []) is None


def test_entropy_in_nats():
    assert entropy([0.5, 0.5]) == pytest.approx(math.log(2))
    assert entropy([0.25] * 4) == pytest.approx(math.log(4))
    assert math.copysign(1.0, entropy([1.0])) == 1.0  # 0.0, not -0.0


def test_component_means_over_the_rollouts_that_have_them():
    means = component_means([{"base": 0.6, "position_term": 0.0, "medal_bonus": 0.0, "delta": 0.2},
                             {"base": None, "position_term": 0.0, "medal_bonus": 0.0, "delta": None}, None])
    assert means == {"reward_base_mean": 0.6, "reward_position_term_mean": 0.0, "reward_medal_bonus_mean": 0.0,
                     "reward_delta_mean": 0.2}


def test_step_metrics():
    lines = [line(0, "valid", 0.7, base=0.7, delta=0.28, cached=True), line(0, "execution_error", 0.0),
             line(1, "format_error", -0.1), line(1, "format_error", -0.1), line(1, "lost", None, tokens=4)]
    m = step_metrics(3, lines, buffer_size=12, states_added=1, sampler_entropy=1.5, gen_s=2.0, exec_s=1.0,
                     update_s=4.0)
    assert m.step == 3 and m.reward_mean == pytest.approx(0.125)  # (0.7 + 0 - 0.1 - 0.1) / 4
    assert m.reward_std == pytest.approx(math.sqrt((0.575**2 + 0.125**2 + 2 * 0.225**2) / 4))
    assert (m.valid_rate, m.exec_error_rate, m.format_error_rate, m.lost_rate) == (0.2, 0.2, 0.4, 0.2)
    assert m.frac_zero_std_groups == 0.5  # group 1's scored rewards tie (-0.1, -0.1)
    assert m.frac_no_valid_groups == 0.5 and m.frac_no_signal_groups == 0.5  # group 1: tied, and no valid rollout
    assert (m.tokens, m.cache_hits, m.reward_base_mean, m.reward_delta_mean) == (44, 1, 0.7, 0.28)
