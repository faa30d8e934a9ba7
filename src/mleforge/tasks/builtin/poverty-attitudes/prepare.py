"""Prepare `poverty-attitudes`: is the government doing too little for the poor? (carData WVS)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from mleforge.tasks.sources import rdataset
from mleforge.tasks.splits import shuffled, split_frame, write_csv

SEED = 42
ID = "id"
TARGET = "poverty"
LEVELS = {"Too Little": 0, "About Right": 1, "Too Much": 2}
FEATURES = ["religion", "degree", "country", "age", "gender"]


def prepare(raw: Path, public: Path, private: Path) -> None:
    frame = rdataset("carData", "WVS")
    codes = frame[TARGET].astype(str).map(LEVELS)
    if codes.isna().any():
        raise ValueError(f"unexpected poverty levels: {sorted(set(frame[TARGET]) - set(LEVELS))}")
    frame[TARGET] = codes.astype("int64")
    frame = frame[[*FEATURES, TARGET]]

    train, test = split_frame(frame, test_fraction=0.25, seed=SEED, stratify=TARGET)
    train = shuffled(train, SEED)
    test = shuffled(test, SEED + 1)
    train.insert(0, ID, range(1, len(train) + 1))
    test.insert(0, ID, range(len(train) + 1, len(train) + len(test) + 1))

    majority = int(train[TARGET].mode().min())
    write_csv(train, public / "train.csv")
    write_csv(test[[ID, *FEATURES]], public / "test.csv")
    write_csv(pd.DataFrame({ID: test[ID], TARGET: majority}), public / "sample_submission.csv")
    write_csv(test[[ID, TARGET]], private / "answers.csv")
