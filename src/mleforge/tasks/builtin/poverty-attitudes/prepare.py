"""Prepare `poverty-attitudes`: is the government doing too little for the poor? (carData WVS)."""

from __future__ import annotations

from pathlib import Path

from mleforge.tasks.sources import rdataset
from mleforge.tasks.splits import numbered_split, write_split

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

    train, test = numbered_split(frame, ID, test_fraction=0.25, seed=SEED, stratify=TARGET)

    majority = int(train[TARGET].mode().min())
    write_split(public, private, train, test, id_column=ID, target=TARGET, features=FEATURES,
                sample=majority)
