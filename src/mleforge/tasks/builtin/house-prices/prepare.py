"""Prepare `house-prices`: sale prices of 2,930 houses in Ames, Iowa (modeldata::ames)."""

from __future__ import annotations

from pathlib import Path

from mleforge.tasks.sources import rdataset
from mleforge.tasks.splits import numbered_split, write_split

SEED = 42
ID = "Id"
TARGET = "SalePrice"


def prepare(raw: Path, public: Path, private: Path) -> None:
    frame = rdataset("modeldata", "ames").drop(columns=["rownames"])
    frame = frame.rename(columns={"Sale_Price": TARGET})
    features = [c for c in frame.columns if c != TARGET]
    frame = frame[[*features, TARGET]]

    train, test = numbered_split(frame, ID, test_fraction=0.2, seed=SEED)

    mean_price = round(float(train[TARGET].mean()), 2)
    write_split(public, private, train, test, id_column=ID, target=TARGET, features=features,
                sample=mean_price)
