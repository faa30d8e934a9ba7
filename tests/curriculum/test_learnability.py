"""The Learnability Potential's pure functions, against numbers worked out by hand."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from scipy.special import betaln

from mleforge.curriculum.config import BufferConfig, LearnabilityConfig, SamplerConfig
from mleforge.curriculum.learnability import (
    beta_moment,
    beta_posterior,
    exploration,
    group_learnability,
    headroom,
    is_success,
    learnability,
    learnability_potential,
    peer_pools,
    pooled_rate,
    snapshot_potentials,
    state_potential,
    success_probability,
    variance_learnability,
)
from mleforge.curriculum.records import BufferSnapshot, StateStats, TaskReference
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


def test_success_valid_counts_any_valid_run_on_every_stage():
    assert is_success("improve", "valid", 0.5, 0.5, "valid")  # no change, yet valid
    assert is_success("improve", "valid", 0.0, 0.5, "valid")
    assert not is_success("improve", "execution_error", -0.2, 0.5, "valid")
    assert is_success("debug", "valid", 0.3, 0.5, "valid") and not is_success("draft", "invalid", -0.1, 0.5, "valid")
    assert not is_success("improve", "valid", 0.5, 0.5, "improve")  # the default kind, as above
    with pytest.raises(ValueError, match="success kind 'valids': expected improve or valid"):
        is_success("debug", "valid", 0.3, 0.5, "valids")
    with pytest.raises(ConfigError, match="learnability.success: got 'valids'; expected one of improve, valid"):
        LearnabilityConfig(success="valids")


def stats(n=0, s=0, best=None, last=(), sid="x", task="t", stage="improve"):
    return StateStats(sid, task, stage, "higher", False, n, s, 0.0, 0.0, tuple(last), best, None, 0)


def test_state_potential_composes_the_terms_laplace():
    ref = TaskReference("t", "higher", top=1.0, baseline=0.5)
    cfg = LearnabilityConfig(exploration_c=0.5, headroom_gamma=1.0, variant="laplace")
    # s = 1, n = 2, N = 10, best 0.75: p 0.5, L 0.25, U 0.447017, H = 1 - 0.25/0.5 = 0.5, LP 0.348509
    pot = state_potential(stats(2, 1, best=0.75), 10, ref, cfg, peers=(0, 30))  # laplace ignores peers
    assert (pot.p, pot.L, pot.H, pot.q) == (0.5, 0.25, 0.5, 0.5)
    assert math.isclose(pot.LP, 0.3485087281, abs_tol=1e-10)
    var = state_potential(stats(2, 1, best=0.75, last=(0.5, 0.5)), 10, ref,
                          LearnabilityConfig(exploration_c=0.5, variant="variance"), peers=(0, 0))
    assert math.isclose(var.L, 0.125)  # ties: lower L than the binary 0.25
    assert state_potential(stats(), 0, None, cfg, peers=(0, 0)).H == 1.0


def frac_moment(a, b, g):
    out = Fraction(1)
    for i in range(g):
        out *= (a + i) / (a + b + i)
    return out


def test_beta_moment_and_group_learnability_by_hand():
    # Beta(1, 1), G = 2: E[p^2] = 1/2 * 2/3 = 1/3, the same for 1 - p: L = 1 - 2/3 = 1/3
    assert beta_moment(1, 1, 2) == pytest.approx(1 / 3, abs=1e-15)
    assert group_learnability(1, 1, 2) == pytest.approx(1 / 3, abs=1e-15)
    # Beta(1, 1), G = 8: E[p^8] = 1/9 (uniform p): L = 7/9
    assert group_learnability(1, 1, 8) == pytest.approx(7 / 9, abs=1e-15)
    # Beta(2, 1), G = 2: E[p^2] = 2/3 * 3/4 = 1/2, E[(1-p)^2] = 1/3 * 2/4 = 1/6: L = 1/3
    assert beta_moment(2, 1, 2) == pytest.approx(0.5, abs=1e-15)
    assert beta_moment(1, 2, 2) == pytest.approx(1 / 6, abs=1e-15)
    assert group_learnability(2, 1, 2) == pytest.approx(1 / 3, abs=1e-15)
    # Beta(3, 1), G = 3: E[p^3] = 3/4 * 4/5 * 5/6 = 1/2, E[(1-p)^3] = 1/4 * 2/5 * 3/6 = 1/20: L = 9/20
    assert group_learnability(3, 1, 3) == pytest.approx(0.45, abs=1e-15)
    # G = 1: one rollout always "ties" with itself; G = 0: E[p^0] = 1
    assert group_learnability(3, 1, 1) == 0.0 and beta_moment(3, 1, 0) == 1.0
    # uncertainty lowers L: measured at p = 1/2 (Beta(9, 9)) beats untried (Beta(1, 1)), and both
    # stay below the known-p limit 1 - 2 (1/2)^8 = 0.9921875
    assert group_learnability(1, 1, 8) < group_learnability(9, 9, 8) < group_learnability(900, 900, 8) < 0.9921875
    assert group_learnability(900, 900, 8) == pytest.approx(0.9921875, abs=2e-4)  # 0.99207
    # non-integer (a, b): the product against Beta functions, E[p^G] = B(a + G, b) / B(a, b)
    a, b, g = 0.3, 2.7, 5
    assert beta_moment(a, b, g) == pytest.approx(math.exp(betaln(a + g, b) - betaln(a, b)), rel=1e-12)
    with pytest.raises(ValueError):
        beta_moment(0.0, 1.0, 2)
    with pytest.raises(ValueError):
        beta_moment(1.0, 1.0, -1)


def test_pooled_rate_and_beta_posterior_by_hand():
    # peers S = 3 of N = 10: q = 4/12 = 1/3
    q = pooled_rate(3, 10)
    assert q == pytest.approx(1 / 3)
    assert pooled_rate(0, 0) == 0.5  # a task and stage nobody has tried yet
    # m = 2, untried: a = 2/3, b = 4/3 (mean q, two pseudo-rollouts)
    assert beta_posterior(0, 0, q, 2.0) == pytest.approx((2 / 3, 4 / 3))
    # k = 1 of n = 4: a = 1 + 2/3 = 5/3, b = 3 + 4/3 = 13/3
    assert beta_posterior(1, 4, q, 2.0) == pytest.approx((5 / 3, 13 / 3))
    for bad in [(3, 2, 0.5, 2.0), (0, 0, 0.0, 2.0), (0, 0, 1.0, 2.0), (0, 0, 0.5, 0.0)]:
        with pytest.raises(ValueError):
            beta_posterior(*bad)


def tiny_snapshot(rollouts_counted=None):
    """s1: t draft 1 of 2; s2: t draft untried; s3: t debug 0 of 4; s4: u draft 2 of 2;
    s5: t debug untried."""
    states = (
        stats(2, 1, sid="s1", stage="draft"), stats(0, 0, sid="s2", stage="draft"),
        stats(4, 0, sid="s3", stage="debug"), stats(2, 2, sid="s4", task="u", stage="draft"),
        stats(0, 0, sid="s5", stage="debug"),
    )
    return BufferSnapshot(0, states, {}, rollouts_counted=rollouts_counted)


def test_pooled_prior_on_a_tiny_snapshot():
    snap = tiny_snapshot()
    assert peer_pools(snap.states) == {("t", "draft"): (1, 2), ("t", "debug"): (0, 4), ("u", "draft"): (2, 2)}
    cfg = LearnabilityConfig(exploration_c=0.0, prior_strength=2.0, group_size=2)
    pots = snapshot_potentials(snap, cfg)
    # q: (t, draft) (1 + 1) / (2 + 2) = 1/2; (t, debug) 1/6; (u, draft) 3/4
    assert [p.q for p in pots] == pytest.approx([1 / 2, 1 / 2, 1 / 6, 3 / 4, 1 / 6])
    # s1: Beta(1 + 1, 1 + 1) = Beta(2, 2): E[p^2] = 2/4 * 3/5 = 3/10, L = 1 - 6/10 = 2/5
    # s2: Beta(1, 1): L = 1/3
    # s3: Beta(1/3, 4 + 5/3): E[p^2] = (1/3)/6 * (4/3)/7 = 2/189, E[(1-p)^2] = (17/3)/6 * (20/3)/7 = 170/189,
    #     L = 17/189
    # s4: Beta(2 + 3/2, 1/2): E[p^2] = 7/8 * 9/10 = 63/80, E[(1-p)^2] = 1/8 * 3/10 = 3/80, L = 7/40
    # s5: Beta(1/3, 5/3): E[p^2] = 1/6 * 4/9 = 2/27, E[(1-p)^2] = 5/6 * 8/9 = 20/27, L = 5/27:
    #     an untried debug state of a task whose debug states fail is not a coin flip (s2: 1/3)
    expected = [Fraction(2, 5), Fraction(1, 3), Fraction(17, 189), Fraction(7, 40), Fraction(5, 27)]
    assert [p.L for p in pots] == pytest.approx([float(x) for x in expected], abs=1e-14)
    third = Fraction(1, 3)
    assert 1 - frac_moment(third, 17 * third, 2) - frac_moment(17 * third, third, 2) == Fraction(17, 189)
    # gamma = 0 and c = 0: LP = L; p is the posterior mean a / (a + b): s3 (1/3) / 6 = 1/18
    assert [p.LP for p in pots] == [p.L for p in pots]
    assert pots[2].p == pytest.approx(1 / 18)


def test_exploration_counts_every_rollout_including_evicted_states():
    assert tiny_snapshot().total_rollouts == 8  # no count given: the states' own rollouts
    snap = tiny_snapshot(rollouts_counted=20)  # 12 more rollouts of states evicted since
    assert snap.total_rollouts == 20
    cfg = LearnabilityConfig(exploration_c=0.5, group_size=2)
    # s2 untried: U = 0.5 sqrt(ln 21 / 1) = 0.5 * 1.744856 = 0.872428; LP = 1/3 + U
    pot = snapshot_potentials(snap, cfg)[1]
    assert pytest.approx(0.5 * math.sqrt(math.log(21)), abs=1e-12) == pot.U
    assert pytest.approx(1 / 3 + 0.8724282, abs=1e-6) == pot.LP


def test_headroom_is_off_by_default_and_gamma_one_brings_it_back():
    ref = TaskReference("t", "higher", top=1.0, baseline=0.5)
    near_top = stats(0, 0, best=0.95)  # H = 1 - 0.45 / 0.5 = 0.1
    off = state_potential(near_top, 0, ref, LearnabilityConfig(exploration_c=0.0), peers=(0, 0))
    on = state_potential(near_top, 0, ref, LearnabilityConfig(exploration_c=0.0, headroom_gamma=1.0), peers=(0, 0))
    # Beta(1, 1), G = 8: L = 7/9; gamma 0: LP = L; gamma 1: LP = 7/9 * 0.1
    assert pytest.approx(0.1) == off.H and pytest.approx(7 / 9) == off.LP
    assert pytest.approx(7 / 90) == on.LP


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
        lambda: LearnabilityConfig(prior_strength=0),
        lambda: LearnabilityConfig(group_size=1),
        lambda: LearnabilityConfig(group_size=4.0),
        lambda: LearnabilityConfig(variant="binary"),  # the old name is read from stored configs only
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
    lp = LearnabilityConfig(variant="laplace", headroom_gamma=1.0, group_size=4)
    assert LearnabilityConfig.from_dict(lp.to_dict()) == lp
    # what buffers made before the beta variant stored: the laplace variant, named "binary"
    old = {"exploration_c": 0.1, "headroom_gamma": 1.0, "improve_neutral": 0.5, "variant": "binary",
           "variance_prior_weight": 2.0}
    assert LearnabilityConfig.from_dict(old) == LearnabilityConfig(variant="laplace", headroom_gamma=1.0)
    with pytest.raises(ConfigError, match="unknown keys"):
        BufferConfig.from_dict({"max_state": 3})
