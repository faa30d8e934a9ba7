"""The answers' target under another name in public/test.csv."""

from __future__ import annotations

import pandas as pd

from mleforge.tasks.leaks import renamed_target_columns

ANSWERS = pd.DataFrame({"id": [3, 1, 2, 4], "Survived": [1, 0, 1, 0]})


def test_a_renamed_copy_is_found_in_any_row_order_and_type():
    test = pd.DataFrame({"id": [1, 2, 3, 4], "age": [30, 41, 22, 8],
                         "label": [0, 1, 1, 0],            # Survived by id, renamed
                         "as_text": ["0", "1", "1", "0"],  # the same as text
                         "shifted": [1, 0, 1, 0]})         # not aligned by id
    assert renamed_target_columns(test, ANSWERS, "id", ["Survived"]) == [("label", "Survived"), ("as_text", "Survived")]


def test_strings_missing_values_and_constant_targets():
    answers = pd.DataFrame({"id": [1, 2, 3], "species": ["a", "b", None], "flat": [5, 5, 5]})
    test = pd.DataFrame({"id": [1, 2, 3], "kind": [" a", "b", None], "other": ["a", "b", "c"], "five": [5, 5, 5]})
    assert renamed_target_columns(test, answers, "id", ["species", "flat"]) == [("kind", "species")]
    assert renamed_target_columns(test.drop(columns=["id"]), answers, "id", ["species"]) == []
