"""Prepare `credit-default`: will a credit applicant default? (modeldata credit_data)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from mleforge.tasks.sources import rdataset
from mleforge.tasks.splits import shuffled, split_frame, write_csv

SEED = 42
ID = "id"
TARGET = "default"
FEATURES = [
    "Seniority", "Home", "Time", "Age", "Marital", "Records", "Job",
    "Expenses", "Income", "Assets", "Debt", "Amount", "Price",
]


def prepare(raw: Path, public: Path, private: Path) -> None:
    frame = rdataset("modeldata", "credit_data")
    frame[TARGET] = (frame["Status"] == "bad").astype("int64")
    frame = frame[[*FEATURES, TARGET]]  # missing feature values stay missing

    train, test = split_frame(frame, test_fraction=0.25, seed=SEED, stratify=TARGET)
    train = shuffled(train, SEED)
    test = shuffled(test, SEED + 1)
    train.insert(0, ID, range(1, len(train) + 1))
    test.insert(0, ID, range(len(train) + 1, len(train) + len(test) + 1))

    prior = round(float(train[TARGET].mean()), 6)
    write_csv(train, public / "train.csv")
    write_csv(test[[ID, *FEATURES]], public / "test.csv")
    write_csv(pd.DataFrame({ID: test[ID], TARGET: prior}), public / "sample_submission.csv")
    write_csv(test[[ID, TARGET]], private / "answers.csv")
