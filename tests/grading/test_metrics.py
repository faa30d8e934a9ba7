"""Named metrics against values hand-computed from MLE-bench's documented behaviour
(its graders call scikit-learn; MAP@k is `mlebench.metrics.average_precision_at_k`)."""

import math

import numpy as np
import pytest

from mleforge.grading.grader import mlebench_round
from mleforge.grading.metrics import (
    average_precision_at_k,
    get_metric,
    undefined_reason,
)
from mleforge.tasks.metric_names import metric_names


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


def test_roc_auc_of_several_columns_is_the_mean_column_auc():
    # jigsaw's grader: roc_auc_score(average="macro"), one AUC per column, then their mean.
    # column 1: positives .9,.8 above negatives .1,.3 -> 1.0
    # column 2: positives .4,.3 vs negatives .2,.5: (.4>.2) (.3>.2) win, (.4<.5) (.3<.5) lose -> 2/4
    y_true = np.array([[1, 0], [0, 1], [1, 1], [0, 0]])
    y_score = np.array([[0.9, 0.2], [0.1, 0.4], [0.8, 0.3], [0.3, 0.5]])
    assert m("roc_auc", y_true, y_score) == 0.75


def test_roc_auc_of_one_class_is_nan_with_a_reason():
    # scikit-learn >= 1.6 warns and returns nan (MLE-bench then reports a nan score).
    with pytest.warns(Warning, match="Only one class"):
        value = m("roc_auc", np.array([1, 1]), np.array([0.2, 0.3]))
    assert math.isnan(value)
    assert "one class" in undefined_reason(get_metric("roc_auc"), None, None)


def test_binary_log_loss():
    expected = -(math.log(0.9) + math.log(0.8)) / 2
    assert m("log_loss", np.array([1, 0]), np.array([0.9, 0.2])) == pytest.approx(expected, abs=1e-15)


def test_multiclass_log_loss_of_distributions():
    y_true = np.array([[1, 0, 0], [0, 0, 1]])
    y_pred = np.array([[0.5, 0.25, 0.25], [0.25, 0.25, 0.5]])
    assert m("log_loss", y_true, y_pred) == pytest.approx(math.log(2), abs=1e-15)


def test_log_loss_clips_at_float64_epsilon():
    # scikit-learn clips to [eps, 1 - eps] with eps = 2**-52 (not Kaggle's old 1e-15):
    # a certain miss costs -ln(2**-52) = 52 ln 2 = 36.04365...
    assert m("log_loss", np.array([1, 0]), np.array([0.0, 0.0])) == pytest.approx(52 * math.log(2) / 2, rel=1e-12)


def test_regression_metrics():
    y_true, y_pred = np.array([1.0, 2.0, 4.0]), np.array([2.0, 2.0, 1.0])
    assert m("mae", y_true, y_pred) == pytest.approx(4 / 3)
    assert m("rmse", y_true, y_pred) == pytest.approx(math.sqrt(10 / 3))
    assert m("rmsle", np.array([0.0, math.e - 1]), np.array([math.e - 1, math.e - 1])) == pytest.approx(
        math.sqrt(0.5)
    )


def test_qwk_weights_by_position_among_the_labels_present():
    # Labels present: 0, 1, 3 at positions 0, 1, 2; weights (i - j)^2 between positions.
    # Observed: (0,0), (1,3) -> positions (1,2), (3,1) -> (2,1): sum W*O = 0 + 1 + 1 = 2.
    # Marginals are [1, 1, 1] both ways: E = 1/3 everywhere, sum W*E = (0+1+4+1+0+1+4+1+0)/3 = 4.
    # kappa = 1 - 2/4 = 0.5 (by label value it would be 1/7 = 0.14286).
    assert m("qwk", np.array([0, 1, 3]), np.array([0, 3, 1])) == pytest.approx(0.5)
    assert m("qwk", np.array([0, 1, 2, 2]), np.array([0, 1, 2, 2])) == 1.0


def test_qwk_of_one_label_is_nan_with_a_reason():
    with pytest.warns(Warning):
        value = m("qwk", np.array([2, 2, 2]), np.array([2, 2, 2]))
    assert math.isnan(value)
    reason = undefined_reason(get_metric("qwk"), np.array([2, 2, 2]), np.array([2, 2, 2]))
    assert "single label" in reason and "(here 2)" in reason


def test_average_precision_at_k_truncates_first_and_duplicates_take_a_rank():
    # "b b a" for truth "a", k=3: a is new at rank 3 -> 1/3 (dropping the duplicate first would give 1/2).
    assert average_precision_at_k({"a"}, ["b", "b", "a"], 3) == pytest.approx(1 / 3)
    # cut to k before anything else: "b b b a" holds no a within 3
    assert average_precision_at_k({"a"}, ["b", "b", "b", "a"], 3) == 0.0
    # two labels: a at rank 1 (1/1), c at rank 3 (2/3): (1 + 2/3) / min(2, 3) = 5/6
    assert average_precision_at_k({"a", "c"}, ["a", "b", "c"], 3) == pytest.approx(5 / 6)
    assert average_precision_at_k(set(), ["a"], 3) == 0.0


def test_map_at_k_is_the_mean_and_a_numpy_float():
    y_true = [{"a"}, {"b"}, {"c"}, {"d"}]
    y_pred = [["a", "x", "y"], ["x", "b"], ["x", "y", "z", "c"], ["d", "d", "e"]]
    # 1 + 1/2 + 0 (c beyond k=3) + 1 -> 2.5 / 4
    value = m("map@3", y_true, y_pred)
    assert value == pytest.approx(2.5 / 4) and type(value) is np.float64
    assert get_metric("map@3").k == 3


def test_rounding_follows_the_return_type():
    # 0.934375 is stored as 0.93437499999999995559...: Python's round is exact on that value
    # (0.93437); numpy's scales by 1e5 first (93437.5, a tie, to even: 93438) -> 0.93438.
    assert mlebench_round(0.934375) == 0.93437
    assert mlebench_round(np.float64(0.934375)) == 0.93438
    # The same 299/320 from accuracy_score (a Python float) and from MAP@1 (np.float64):
    truth = ["a"] * 320
    guess = ["a"] * 299 + ["b"] * 21
    assert mlebench_round(m("accuracy", np.array(truth), np.array(guess))) == 0.93437
    assert mlebench_round(m("map@1", [{t} for t in truth], [[g] for g in guess])) == 0.93438


def test_directions_and_unknown_names():
    assert get_metric("rmse").is_lower_better and not get_metric("qwk").is_lower_better
    assert "map@K" in metric_names()
    for bad in ("map@0", "f2", "MAP@3"):
        with pytest.raises(KeyError):
            get_metric(bad)
