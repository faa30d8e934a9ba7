"""Prepare `telco-churn`: will a telecom customer churn? (modeldata mlc_churn)."""

from __future__ import annotations

from pathlib import Path

from mleforge.tasks.sources import rdataset
from mleforge.tasks.splits import numbered_split, write_split

SEED = 42
ID = "id"
TARGET = "churn"


def prepare(raw: Path, public: Path, private: Path) -> None:
    frame = rdataset("modeldata", "mlc_churn").drop(columns=["rownames"])
    frame[TARGET] = (frame[TARGET] == "yes").astype("int64")
    features = [c for c in frame.columns if c != TARGET]

    train, test = numbered_split(frame, ID, test_fraction=0.25, seed=SEED, stratify=TARGET)

    prior = round(float(train[TARGET].mean()), 6)
    write_split(public, private, train, test, id_column=ID, target=TARGET, features=features,
                sample=prior)
