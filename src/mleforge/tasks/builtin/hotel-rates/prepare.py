"""Prepare `hotel-rates`: the average daily rate of a Lisbon resort-hotel booking (modeldata hotel_rates)."""

from __future__ import annotations

from pathlib import Path

from mleforge.tasks.sources import rdataset
from mleforge.tasks.splits import numbered_split, write_split

SEED = 42
ID = "id"
TARGET = "avg_price_per_room"


def prepare(raw: Path, public: Path, private: Path) -> None:
    frame = rdataset("modeldata", "hotel_rates").drop(columns=["rownames"])
    features = [c for c in frame.columns if c != TARGET]
    frame = frame[[*features, TARGET]]  # arrival_date stays an ISO date string

    train, test = numbered_split(frame, ID, test_fraction=0.2, seed=SEED)

    mean = round(float(train[TARGET].mean()), 4)
    write_split(public, private, train, test, id_column=ID, target=TARGET, features=features,
                sample=mean)
