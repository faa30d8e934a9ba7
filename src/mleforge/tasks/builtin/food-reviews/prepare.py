"""Prepare `food-reviews`: is an Amazon fine-food review a 5-star one? (modeldata small_fine_foods)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from mleforge.tasks.sources import rdataset
from mleforge.tasks.splits import numbered, write_split

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
    train, test = numbered(_frame("training_data"), _frame("testing_data"), ID, SEED)

    prior = round(float(train[TARGET].mean()), 6)
    write_split(public, private, train, test, id_column=ID, target=TARGET, features=FEATURES,
                sample=prior)
