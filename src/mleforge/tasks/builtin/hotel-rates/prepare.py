"""Prepare `hotel-rates`: the average daily rate of a Lisbon resort-hotel booking (modeldata hotel_rates)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from mleforge.tasks.sources import rdataset
from mleforge.tasks.splits import shuffled, split_frame, write_csv

SEED = 42
ID = "id"
TARGET = "avg_price_per_room"


def prepare(raw: Path, public: Path, private: Path) -> None:
    frame = rdataset("modeldata", "hotel_rates").drop(columns=["rownames"])
    features = [c for c in frame.columns if c != TARGET]
    frame = frame[[*features, TARGET]]  # arrival_date stays an ISO date string

    train, test = split_frame(frame, test_fraction=0.2, seed=SEED)
    train = shuffled(train, SEED)
    test = shuffled(test, SEED + 1)
    train.insert(0, ID, range(1, len(train) + 1))
    test.insert(0, ID, range(len(train) + 1, len(train) + len(test) + 1))

    mean = round(float(train[TARGET].mean()), 4)
    write_csv(train, public / "train.csv")
    write_csv(test[[ID, *features]], public / "test.csv")
    write_csv(pd.DataFrame({ID: test[ID], TARGET: mean}), public / "sample_submission.csv")
    write_csv(test[[ID, TARGET]], private / "answers.csv")
