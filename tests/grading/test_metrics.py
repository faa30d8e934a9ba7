"""Metrics against hand-computed values (and scikit-learn where it implements the same thing)."""

import math

import numpy as np
import pytest

from mleforge.grading.metrics import get_metric, metric_names


def m(name, y_true, y_pred):
    return get_metric(name)(y_true, y_pred)


def test_accuracy():
    assert m("accuracy", np.array(["a", "b", "a", "c"]), np.array(["a", "b", "b", "c"])) == 0.75


def test_macro_f1_hand_computed():
    # class a: tp=1 fp=1 fn=1 -> f1 = 2/4 = .5; class b: tp=1 fp=0 fn=1 -> 2/3; class c: tp=1 fp=1 fn=0 -> 2/3
    y_true = np.array(["a", "a", "b", "b", "c"])
    y_pred = np.array(["a", "c", "b", "a", "c"])
    assert m("macro_f1", y_true, y_pred) == pytest.approx((0.5 + 2 / 3 + 2 / 3) / 3)


def test_roc_auc_with_ties():
    # positives score .8,.4; negatives .4,.1: pairs (.8>.4)=1, (.8>.1)=1, (.4=.4)=.5, (.4>.1)=1 -> 3.5/4
    assert m("roc_auc", np.array([1, 1, 0, 0]), np.array([0.8, 0.4, 0.4, 0.1])) == 0.875


def test_roc_auc_needs_both_classes():
    with pytest.raises(ValueError, match="both classes"):
        m("roc_auc", np.array([1, 1]), np.array([0.2, 0.3]))


def test_binary_log_loss():
    expected = -(math.log(0.9) + math.log(0.8)) / 2
    assert m("log_loss", np.array([1, 0]), np.array([0.9, 0.2])) == pytest.approx(expected)


def test_multiclass_log_loss_rescales_rows():
    y_true = np.array([[1, 0, 0], [0, 0, 1]])
    # second row sums to 2: rescaled to (.25, .25, .5)
    y_pred = np.array([[0.5, 0.25, 0.25], [0.5, 0.5, 1.0]])
    assert m("log_loss", y_true, y_pred) == pytest.approx(-(math.log(0.5) + math.log(0.5)) / 2)


def test_log_loss_clips_certain_mistakes():
    value = m("log_loss", np.array([1]), np.array([0.0]))
    assert value == pytest.approx(-math.log(1e-15))


def test_regression_metrics():
    y_true, y_pred = np.array([1.0, 2.0, 4.0]), np.array([2.0, 2.0, 1.0])
    assert m("mae", y_true, y_pred) == pytest.approx(4 / 3)
    assert m("rmse", y_true, y_pred) == pytest.approx(math.sqrt(10 / 3))
    assert m("rmsle", np.array([0.0, math.e - 1]), np.array([math.e - 1, math.e - 1])) == pytest.approx(
        math.sqrt(0.5)
    )


def test_qwk_hand_computed():
    # labels 0..2; O = [[1,0,0],[0,1,0],[1,0,1]] (true rows, pred cols), n=4
    y_true = np.array([0, 1, 2, 2])
    y_pred = np.array([0, 1, 0, 2])
    # W = (i-j)^2/4; sum W*O = W[2,0] = 1
    # row marginals (2? no) true: [1,1,2]; pred: [2,1,1]; E = outer/4
    # sum W*E = (1/4)*(1*1*.25 + 1*1*1 + 1*2*.25 + 1*1*.25 + 2*2*1 + 2*1*.25) / ... computed below
    rows, cols = np.array([1, 1, 2]), np.array([2, 1, 1])
    w = np.array([[(i - j) ** 2 / 4 for j in range(3)] for i in range(3)])
    expected = 1 - 1.0 / np.sum(w * np.outer(rows, cols) / 4)
    assert m("qwk", y_true, y_pred) == pytest.approx(expected)
    assert m("qwk", y_true, y_true) == 1.0


def test_map_at_k():
    y_true = ["a", "b", "c", "d"]
    y_pred = [["a", "x", "y"], ["x", "b"], ["x", "y", "z", "c"], ["d", "d", "e"]]
    # 1 + 1/2 + 0 (c beyond k=3) + 1 -> 2.5 / 4
    assert m("map@3", y_true, y_pred) == pytest.approx(2.5 / 4)
    assert get_metric("map@3").k == 3


def test_directions_and_unknown_names():
    assert get_metric("rmse").is_lower_better and not get_metric("qwk").is_lower_better
    assert "map@K" in metric_names()
    for bad in ("map@0", "f2", "MAP@3"):
        with pytest.raises(KeyError):
            get_metric(bad)


def test_agrees_with_scikit_learn():
    from sklearn import metrics as skm

    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 300)
    p = rng.uniform(0.01, 0.99, 300).round(2)  # away from 0 and 1, where the clipping eps differs
    assert m("roc_auc", y, p) == pytest.approx(skm.roc_auc_score(y, p))
    assert m("log_loss", y, p) == pytest.approx(skm.log_loss(y, p))
    a, b = rng.integers(0, 5, 300), rng.integers(0, 5, 300)
    assert m("qwk", a, b) == pytest.approx(skm.cohen_kappa_score(a, b, weights="quadratic"))
    assert m("macro_f1", a, b) == pytest.approx(skm.f1_score(a, b, average="macro"))
