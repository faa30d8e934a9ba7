"""The preparers' helpers: seeded orders, ids that follow on, the four files written as given."""

from __future__ import annotations

import numpy as np
import pandas as pd

from mleforge.tasks.splits import numbered, numbered_split, write_split


def test_numbered_shuffles_each_part_with_its_own_seed_and_numbers_test_after_train():
    train = pd.DataFrame({"x": [10, 11, 12, 13]})
    test = pd.DataFrame({"x": [20, 21, 22]})
    got_train, got_test = numbered(train, test, "id", seed=7)
    assert list(got_train["id"]) == [1, 2, 3, 4]
    assert list(got_test["id"]) == [5, 6, 7]
    assert list(got_train.columns) == ["id", "x"]
    assert list(got_train["x"]) == [10 + i for i in np.random.default_rng(7).permutation(4)]
    assert list(got_test["x"]) == [20 + i for i in np.random.default_rng(8).permutation(3)]


def test_numbered_split_keeps_every_row_once_and_is_repeatable():
    frame = pd.DataFrame({"x": range(20), "y": [0, 1] * 10})
    train, test = numbered_split(frame, "id", test_fraction=0.25, seed=3, stratify="y")
    assert (len(train), len(test)) == (15, 5)
    assert sorted([*train["x"], *test["x"]]) == list(range(20))
    assert list(train["id"]) == list(range(1, 16)) and list(test["id"]) == list(range(16, 21))
    again_train, again_test = numbered_split(frame, "id", test_fraction=0.25, seed=3, stratify="y")
    pd.testing.assert_frame_equal(train, again_train)
    pd.testing.assert_frame_equal(test, again_test)


def test_write_split_writes_the_four_files(tmp_path):
    public, private = tmp_path / "public", tmp_path / "private"
    train = pd.DataFrame({"id": [1, 2], "a": [0.5, 1.5], "y": [0, 1]})
    test = pd.DataFrame({"id": [3, 4], "a": [2.5, 3.5], "y": [1, 0]})
    write_split(public, private, train, test, id_column="id", target="y", features=["a"], sample=0.25)
    assert (public / "train.csv").read_text() == "id,a,y\n1,0.5,0\n2,1.5,1\n"
    assert (public / "test.csv").read_text() == "id,a\n3,2.5\n4,3.5\n"
    assert (public / "sample_submission.csv").read_text() == "id,y\n3,0.25\n4,0.25\n"
    assert (private / "answers.csv").read_text() == "id,y\n3,1\n4,0\n"


def test_write_split_takes_a_whole_sample_and_answers_frame(tmp_path):
    public, private = tmp_path / "public", tmp_path / "private"
    test = pd.DataFrame({"id": [3], "a": [2.5], "y": [1]})
    sample = pd.DataFrame({"id": [3], "p0": [0.5], "p1": [0.5]})
    answers = pd.DataFrame({"id": [3], "p0": [0], "p1": [1]})
    write_split(public, private, test, test, id_column="id", target="y", features=["a"], sample=sample,
                answers=answers)
    assert (public / "sample_submission.csv").read_text() == "id,p0,p1\n3,0.5,0.5\n"
    assert (private / "answers.csv").read_text() == "id,p0,p1\n3,0,1\n"
