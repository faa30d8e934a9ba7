"""Prepare `diabetes`: disease progression of 442 diabetes patients one year after baseline
(Efron et al. 2004, bundled with scikit-learn)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from mleforge.tasks.sources import sklearn_dataset
from mleforge.tasks.splits import shuffled, split_frame, write_csv

SEED = 42
ID = "id"
TARGET = "progression"


def prepare(raw: Path, public: Path, private: Path) -> None:
    frame = sklearn_dataset("diabetes")
    # The target is an integer score stored as float; keep it an integer.
    frame[TARGET] = frame.pop("target").round().astype("int64")
    features = [c for c in frame.columns if c != TARGET]

    train, test = split_frame(frame, test_fraction=0.25, seed=SEED)
    train = shuffled(train, SEED)
    test = shuffled(test, SEED + 1)
    train.insert(0, ID, range(1, len(train) + 1))
    test.insert(0, ID, range(len(train) + 1, len(train) + len(test) + 1))

    median = float(train[TARGET].median())
    write_csv(train, public / "train.csv")
    write_csv(test[[ID, *features]], public / "test.csv")
    write_csv(pd.DataFrame({ID: test[ID], TARGET: median}), public / "sample_submission.csv")
    write_csv(test[[ID, TARGET]], private / "answers.csv")
