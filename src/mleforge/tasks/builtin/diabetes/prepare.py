"""Prepare `diabetes`: disease progression of 442 diabetes patients one year after baseline
(Efron et al. 2004, bundled with scikit-learn)."""

from __future__ import annotations

from pathlib import Path

from mleforge.tasks.sources import sklearn_dataset
from mleforge.tasks.splits import numbered_split, write_split

SEED = 42
ID = "id"
TARGET = "progression"


def prepare(raw: Path, public: Path, private: Path) -> None:
    frame = sklearn_dataset("diabetes")
    # The target is an integer score stored as float; keep it an integer.
    frame[TARGET] = frame.pop("target").round().astype("int64")
    features = [c for c in frame.columns if c != TARGET]

    train, test = numbered_split(frame, ID, test_fraction=0.25, seed=SEED)

    median = float(train[TARGET].median())
    write_split(public, private, train, test, id_column=ID, target=TARGET, features=features,
                sample=median)
