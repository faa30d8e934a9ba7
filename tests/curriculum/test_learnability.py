"""The Learnability Potential's pure functions, against numbers worked out by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mleforge.curriculum.config import BufferConfig, LearnabilityConfig, SamplerConfig
from mleforge.curriculum.learnability import (
    exploration,
    headroom,
    is_success,
    learnability,
    learnability_potential,
    state_potential,
    success_probability,
    variance_learnability,
)
from mleforge.curriculum.records import StateStats, TaskReference
from mleforge.curriculum.sampler import mixed_softmax
from mleforge.errors import ConfigError


def test_success_probability_and_learnability():
    # s = 1, n = 2: p = 2 / 4 = 0.5, L = 0.5 * 0.5 = 0.25 (the frontier)
    assert success_probability(1, 2) == 0.5
    assert learnability(0.5) == 0.25
    # untried: p = 1 / 2
    assert success_probability(0, 0) == 0.5
    # s = 3, n = 4: p = 4 / 6 = 2/3, L = 2/3 * 1/3 = 2/9 = 0.2222...
    assert success_probability(3, 4) == pytest.approx(2 / 3)
    assert learnability(2 / 3) == pytest.approx(2 / 9)
    # s = 0, n = 8: p = 1 / 10, L = 0.1 * 0.9 = 0.09 (hopeless so far)
    assert learnability(success_probability(0, 8)) == pytest.approx(0.09)
    with pytest.raises(ValueError):
        success_probability(3, 2)
    with pytest.raises(ValueError):
        learnability(1.5)


def test_exploration():
    # N = 10, n_s = 2, c = 0.5: U = 0.5 * sqrt(ln 11 / 3) = 0.5 * sqrt(2.397895 / 3)
    #   = 0.5 * sqrt(0.799298) = 0.5 * 0.894035 = 0.447017
    assert exploration(10, 2, 0.5) == pytest.approx(0.4470174561, abs=1e-10)
    assert exploration(0, 0, 0.5) == 0.0  # ln(1) = 0: an empty buffer explores nothing yet
    # the defaults' docstring: N = 1000, c = 0.1: untried 0.1 * sqrt(6.909) = 0.263; after 8 rollouts 0.0876
    assert exploration(1000, 0, 0.1) == pytest.approx(0.26285, abs=1e-5)
    assert exploration(1000, 8, 0.1) == pytest.approx(0.08762, abs=1e-5)


def test_learnability_potential():
    # L = 0.25, U = 0.447017 (above), H = 0.5, gamma = 1: LP = 0.697017 * 0.5 = 0.348509
    U = exploration(10, 2, 0.5)
    assert learnability_potential(0.25, U, 0.5, 1.0) == pytest.approx(0.3485087281, abs=1e-10)
    # gamma = 2: (0.25 + 0.05) * 0.5^2 = 0.075
    assert learnability_potential(0.25, 0.05, 0.5, 2.0) == pytest.approx(0.075)
    # gamma = 0 ignores headroom, even H = 0 (0^0 = 1)
    assert learnability_potential(0.2, 0.1, 0.0, 0.0) == pytest.approx(0.3)


def test_headroom():
    # higher is better, baseline 0.5, top 1.0, best 0.8: progress 0.3 / 0.5 = 0.6, H = 0.4
    assert headroom(0.8, 1.0, 0.5) == pytest.approx(0.4)
    # lower is better, baseline 0.5, top 0.1, best 0.3: progress -0.2 / -0.4 = 0.5, H = 0.5
    assert headroom(0.3, 0.1, 0.5) == pytest.approx(0.5)
    assert headroom(1.2, 1.0, 0.5) == 0.0  # past the top
    assert headroom(0.2, 1.0, 0.5) == 1.0  # worse than the baseline
    assert headroom(None, 1.0, 0.5) == 1.0  # no valid score yet
    assert headroom(0.8, None, 0.5) == 1.0  # unknown references
    assert headroom(0.8, 1.0, 1.0) == 1.0  # degenerate references


def test_variance_learnability():
    # [0, 1, 0, 1]: var 0.25; (4 * 0.25 + 2 * 0.25) / 6 = 0.25
    assert variance_learnability([0, 1, 0, 1], prior_weight=2) == pytest.approx(0.25)
    # [0.5, 0.5] all tie: var 0; (2 * 0 + 2 * 0.25) / 4 = 0.125
    assert variance_learnability([0.5, 0.5], prior_weight=2) == pytest.approx(0.125)
    # [0.2, 0.6], no prior: var = 0.04
    assert variance_learnability([0.2, 0.6], prior_weight=0) == pytest.approx(0.04)
    assert variance_learnability([], prior_weight=2) == 0.25


def test_is_success_uses_the_neutral_point():
    assert is_success("draft", "valid", 0.3, 0.5)  # any valid submission
    assert not is_success("debug", "timeout", 0.0, 0.5)
    assert is_success("improve", "valid", 0.51, 0.5)
    assert not is_success("improve", "valid", 0.5, 0.5)  # no change is not a success


def stats(n=0, s=0, best=None, last=()):
    return StateStats("x", "t", "improve", "higher", False, n, s, 0.0, 0.0, tuple(last), best, None, 0)


def test_state_potential_composes_the_terms():
    ref = TaskReference("t", "higher", top=1.0, baseline=0.5)
    cfg = LearnabilityConfig(exploration_c=0.5, headroom_gamma=1.0)
    # s = 1, n = 2, N = 10, best 0.75: p 0.5, L 0.25, U 0.447017, H = 1 - 0.25/0.5 = 0.5, LP 0.348509
    pot = state_potential(stats(2, 1, best=0.75), 10, ref, cfg)
    assert (pot.p, pot.L, pot.H) == (0.5, 0.25, 0.5)
    assert math.isclose(pot.LP, 0.3485087281, abs_tol=1e-10)
    var = state_potential(stats(2, 1, best=0.75, last=(0.5, 0.5)), 10, ref,
                          LearnabilityConfig(exploration_c=0.5, variant="variance"))
    assert math.isclose(var.L, 0.125)  # ties: lower L than the binary 0.25
    assert state_potential(stats(), 0, None, cfg).H == 1.0


def test_mixed_softmax():
    # LP [0, 0.05], tau 0.05: softmax of [0, 1] = [1/(1+e), e/(1+e)] = [0.268941, 0.731059];
    # * 0.9 + 0.1 / 2 = [0.292047, 0.707953]
    probs = mixed_softmax(np.array([0.0, 0.05]), tau=0.05, epsilon=0.1)
    assert probs == pytest.approx([0.2920472792, 0.7079527208], abs=1e-10)
    big = mixed_softmax(np.array([0.0, 1000.0]), tau=0.001, epsilon=0.2)  # no overflow
    assert big == pytest.approx([0.1, 0.9]) and math.isclose(big.sum(), 1.0)


@pytest.mark.parametrize(
    "make",
    [
        lambda: LearnabilityConfig(exploration_c=-1),
        lambda: LearnabilityConfig(variant="other"),
        lambda: LearnabilityConfig(headroom_gamma=float("nan")),
        lambda: SamplerConfig(tau=0),
        lambda: SamplerConfig(epsilon=1.5),
        lambda: SamplerConfig(group_size=0),
        lambda: SamplerConfig(kind="greedy"),
        lambda: BufferConfig(max_states=0),
        lambda: BufferConfig(synchronous="OFF"),
        lambda: BufferConfig(last_k=True),
    ],
)
def test_configs_reject_bad_values(make):
    with pytest.raises(ConfigError):
        make()


def test_config_round_trip():
    cfg = SamplerConfig(kind="uniform", group_size=4)
    assert SamplerConfig.from_dict(cfg.to_dict()) == cfg
    with pytest.raises(ConfigError, match="unknown keys"):
        BufferConfig.from_dict({"max_state": 3})
