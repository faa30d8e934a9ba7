"""Prepare `house-prices`: sale prices of 2,930 houses in Ames, Iowa (modeldata::ames)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from mleforge.tasks.sources import rdataset
from mleforge.tasks.splits import shuffled, split_frame, write_csv

SEED = 42
ID = "Id"
TARGET = "SalePrice"


def prepare(raw: Path, public: Path, private: Path) -> None:
    frame = rdataset("modeldata", "ames").drop(columns=["rownames"])
    frame = frame.rename(columns={"Sale_Price": TARGET})
    features = [c for c in frame.columns if c != TARGET]
    frame = frame[[*features, TARGET]]

    train, test = split_frame(frame, test_fraction=0.2, seed=SEED)
    train = shuffled(train, SEED)
    test = shuffled(test, SEED + 1)
    train.insert(0, ID, range(1, len(train) + 1))
    test.insert(0, ID, range(len(train) + 1, len(train) + len(test) + 1))

    mean_price = round(float(train[TARGET].mean()), 2)
    write_csv(train, public / "train.csv")
    write_csv(test[[ID, *features]], public / "test.csv")
    write_csv(pd.DataFrame({ID: test[ID], TARGET: mean_price}), public / "sample_submission.csv")
    write_csv(test[[ID, TARGET]], private / "answers.csv")
