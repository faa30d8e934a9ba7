"""Prepare `titanic`: survival of 1,309 Titanic passengers (carData::TitanicSurvival)."""

from __future__ import annotations

from pathlib import Path

from mleforge.tasks.sources import rdataset
from mleforge.tasks.splits import numbered_split, write_split

SEED = 42
ID = "PassengerId"
TARGET = "Survived"
FEATURES = ["name", "sex", "age", "passengerClass"]


def prepare(raw: Path, public: Path, private: Path) -> None:
    frame = rdataset("carData", "TitanicSurvival")
    frame = frame.rename(columns={"rownames": "name"})
    frame[TARGET] = (frame["survived"] == "yes").astype("int64")
    frame = frame[[*FEATURES, TARGET]]

    train, test = numbered_split(frame, ID, test_fraction=0.2, seed=SEED, stratify=TARGET)

    majority = int(train[TARGET].mode().min())
    write_split(public, private, train, test, id_column=ID, target=TARGET, features=FEATURES,
                sample=majority)
