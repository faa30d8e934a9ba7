"""Prepare `food-reviews`: is an Amazon fine-food review a 5-star one? (modeldata small_fine_foods)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from mleforge.tasks.sources import rdataset
from mleforge.tasks.splits import shuffled, write_csv

SEED = 42
ID = "id"
TARGET = "great"
FEATURES = ["product", "review"]


def _frame(item: str) -> pd.DataFrame:
    frame = rdataset("modeldata", item)
    frame[TARGET] = (frame["score"] == "great").astype("int64")
    return frame[[*FEATURES, TARGET]]


def prepare(raw: Path, public: Path, private: Path) -> None:
    # The source ships its own train/test split (different products); keep it.
    train = shuffled(_frame("training_data"), SEED)
    test = shuffled(_frame("testing_data"), SEED + 1)
    train.insert(0, ID, range(1, len(train) + 1))
    test.insert(0, ID, range(len(train) + 1, len(train) + len(test) + 1))

    prior = round(float(train[TARGET].mean()), 6)
    write_csv(train, public / "train.csv")
    write_csv(test[[ID, *FEATURES]], public / "test.csv")
    write_csv(pd.DataFrame({ID: test[ID], TARGET: prior}), public / "sample_submission.csv")
    write_csv(test[[ID, TARGET]], private / "answers.csv")
