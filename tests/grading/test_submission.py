"""Submission checks that MLE-bench's graders make, with their reasons (built-in tasks)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from mleforge.errors import InvalidSubmission
from mleforge.grading.metrics import get_metric
from mleforge.grading.submission import prepare_for_metric, read_submission

CLASSES = ("a", "b", "c")
ANSWERS = pd.DataFrame({"id": [1, 2], "a": [1, 0], "b": [0, 0], "c": [0, 1]})


def probabilities(rows):
    return pd.DataFrame({"id": [1, 2], **{c: [r[i] for r in rows] for i, c in enumerate(CLASSES)}})


def log_loss_inputs(rows):
    return prepare_for_metric(probabilities(rows), ANSWERS, "id", CLASSES, get_metric("log_loss"))


def test_multiclass_rows_must_sum_to_one_and_are_never_rescaled():
    # np.isclose(sum, 1, atol=1e-6) as leaf, spooky and dog-breed check: |sum - 1| <= 1e-6 + 1e-5 * 1.
    y_true, y_pred = log_loss_inputs([(0.5, 0.25, 0.25), (0.25, 0.25, 0.5 + 1.05e-5)])
    assert y_pred[1, 2] == 0.5 + 1.05e-5  # kept as written
    with pytest.raises(InvalidSubmission, match=r"1 rows of probabilities do not sum to 1 \(id 2 sums to 1.00001\d*\)"):
        log_loss_inputs([(0.5, 0.25, 0.25), (0.25, 0.25, 0.5 + 1.2e-5)])
    with pytest.raises(InvalidSubmission, match="2 rows .*id 1 sums to 2, id 2 sums to 0.5"):
        log_loss_inputs([(1.0, 0.5, 0.5), (0.25, 0.25, 0.0)])


def test_several_roc_auc_columns_need_no_sum():
    y_true, y_pred = prepare_for_metric(probabilities([(0.9, 0.9, 0.9), (0.1, 0.2, 0.3)]), ANSWERS, "id",
                                        CLASSES, get_metric("roc_auc"))
    assert y_true.shape == y_pred.shape == (2, 3)


def test_ranking_splits_on_single_spaces():
    answers = pd.DataFrame({"id": [1, 2], "label": ["a", "b c"]})
    submission = pd.DataFrame({"id": [2, 1], "label": ["x  b", "a b"]})
    actual, predicted = prepare_for_metric(submission, answers, "id", ("label",), get_metric("map@3"))
    assert actual == [{"a"}, {"b", "c"}]
    assert predicted == [["a", "b"], ["x", "", "b"]]  # the double space holds an empty label
    # row 2: b is new at rank 3 -> 1/3, divided by min(2, 3): 1/6; row 1: 1. Mean 7/12.
    assert get_metric("map@3")(actual, predicted) == pytest.approx(7 / 12)


def test_floats_are_read_to_the_nearest_double(tmp_path):
    path = tmp_path / "s.csv"
    path.write_text("id,y\n1,0.1\n2,2.675\n3,1e-320\n")
    values = read_submission(path)["y"].to_numpy()
    assert values.tolist() == [0.1, 2.675, 1e-320] and values.dtype == np.float64
