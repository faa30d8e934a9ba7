"""Prepare `credit-default`: will a credit applicant default? (modeldata credit_data)."""

from __future__ import annotations

from pathlib import Path

from mleforge.tasks.sources import rdataset
from mleforge.tasks.splits import numbered_split, write_split

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

    train, test = numbered_split(frame, ID, test_fraction=0.25, seed=SEED, stratify=TARGET)

    prior = round(float(train[TARGET].mean()), 6)
    write_split(public, private, train, test, id_column=ID, target=TARGET, features=FEATURES,
                sample=prior)
