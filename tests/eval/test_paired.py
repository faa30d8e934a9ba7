"""The paired comparison's statistics (mleforge.eval.paired) on hand-computed numbers."""

from __future__ import annotations

import math

import pytest

from mleforge.eval.paired import (
    PairedDifference,
    PairingError,
    paired_difference,
    t_quantile,
    unit_means,
)

# Student's t 0.975 quantiles from printed tables (to the digits the tables give).
T975 = {1: 12.7062047, 2: 4.30265273, 3: 3.18244631, 4: 2.77644511, 10: 2.22813885, 30: 2.04227246}


def test_t_quantiles_match_the_tables():
    for df, value in T975.items():
        assert t_quantile(0.975, df) == pytest.approx(value, abs=1e-7)
    assert t_quantile(0.995, 3) == pytest.approx(5.84090931, abs=1e-7)
    assert t_quantile(0.975, 1001) == pytest.approx(1.96233671, abs=1e-7)  # near the normal's 1.959964
    # df 1 is the Cauchy: tan(pi * (q - 1/2)) exactly
    assert t_quantile(0.9, 1) == pytest.approx(math.tan(0.4 * math.pi), rel=1e-12)
    for bad in (0, 1.5, True):
        with pytest.raises(ValueError, match="df"):
            t_quantile(0.975, bad)
    with pytest.raises(ValueError, match="q must be"):
        t_quantile(0.4, 3)


def test_unit_means_first_then_a_t_interval_over_units():
    a = {"s1": [0.0, 1.0], "s2": [0.5, 0.5], "s3": [1.0, 1.0]}  # unit means 0.5, 0.5, 1
    b = {"s1": [1.0, 1.0], "s2": [0.0, 0.5], "s3": [1.0, 1.0]}  # unit means 1, 0.25, 1
    d = paired_difference(a, b, metric="valid_rate")
    # d_i = [0.5, -0.25, 0]: mean 1/12; deviations 5/12, -4/12, -1/12: squares sum 42/144,
    # sample variance 7/48, se sqrt(7/48 / 3) = sqrt(7) / 12
    assert (d.metric, d.n) == ("valid_rate", 3)
    assert d.mean_a == pytest.approx(2 / 3) and d.mean_b == pytest.approx(0.75)
    assert d.diff == pytest.approx(1 / 12) and d.se == pytest.approx(math.sqrt(7) / 12)
    half = T975[2] * math.sqrt(7) / 12
    assert d.ci_low == pytest.approx(1 / 12 - half, abs=1e-7) and d.ci_high == pytest.approx(1 / 12 + half, abs=1e-7)
    assert (d.up, d.down, d.tied) == (1, 1, 1) and d.covers_zero is True
    assert PairedDifference.from_dict(d.to_dict()) == d


def test_a_clear_difference_excludes_zero():
    a = {f"u{i}": [0.0] for i in range(5)}
    b = {f"u{i}": [float(i + 1)] for i in range(5)}  # d = 1..5: mean 3, variance 2.5, se sqrt(0.5)
    d = paired_difference(a, b)
    assert d.diff == 3.0 and d.se == pytest.approx(math.sqrt(0.5))
    assert d.ci_low == pytest.approx(3 - T975[4] * math.sqrt(0.5), abs=1e-7)
    assert d.ci_low > 0 and d.covers_zero is False and (d.up, d.down, d.tied) == (5, 0, 0)
    # swapping the sides mirrors everything
    r = paired_difference(b, a)
    assert r.diff == -3.0 and r.ci_high == pytest.approx(-d.ci_low) and (r.up, r.down) == (0, 5)
    # a 99% interval is wider
    wide = paired_difference(a, b, confidence=0.99)
    assert wide.ci_low < d.ci_low and wide.confidence == 0.99


def test_pairing_is_what_removes_the_units_own_spread():
    # the units differ a lot (0, 10, 20), B is A + 1 everywhere: the paired se is 0
    a = {"x": [0.0], "y": [10.0], "z": [20.0]}
    b = {k: [v[0] + 1.0] for k, v in a.items()}
    d = paired_difference(a, b)
    assert d.diff == 1.0 and d.se == 0.0 and d.ci_low == 1.0 and d.ci_high == 1.0 and d.covers_zero is False


def test_edge_cases_and_refusals():
    one = paired_difference({"s": [0.0, 1.0]}, {"s": [1.0, 1.0]})
    assert (one.n, one.diff, one.se, one.ci_low, one.covers_zero) == (1, 0.5, None, None, None)
    none = paired_difference({}, {})
    assert (none.n, none.diff, none.mean_a) == (0, None, None)
    with pytest.raises(PairingError, match="only in A \\['s2'\\]"):
        paired_difference({"s1": [1.0], "s2": [1.0]}, {"s1": [1.0]})
    with pytest.raises(PairingError, match="no values"):
        paired_difference({"s1": []}, {"s1": [1.0]})
    with pytest.raises(PairingError, match="finite"):
        unit_means({"s1": [float("nan")]})
    with pytest.raises(PairingError, match="unit 's1' has a value that is not a number: \\[0.5, None\\]"):
        paired_difference({"s1": [0.5, None]}, {"s1": [1.0, 1.0]})
    with pytest.raises(ValueError, match="confidence"):
        paired_difference({"s": [1.0]}, {"s": [1.0]}, confidence=1.0)
    # a value per unit instead of a list of them: a PairingError that says so, not a TypeError
    for bad in (0.5, None, "0.5"):
        with pytest.raises(PairingError, match="unit 's1': give a list of values, one per seed"):
            paired_difference({"s1": bad}, {"s1": [1.0]})
    # ties up to rounding count as ties
    tie = paired_difference({"s": [0.1 + 0.2]}, {"s": [0.3]})
    assert (tie.up, tie.down, tie.tied) == (0, 0, 1)
