"""Prepare `chicago-ridership`: forecast daily Clark/Lake "L" boardings (modeldata Chicago)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from mleforge.tasks.sources import rdataset
from mleforge.tasks.splits import write_split

ID = "id"
TARGET = "ridership"
TEST_DAYS = 365
# `Clark_Lake` is the target itself lagged 14 days (Clark_Lake[t] == ridership[t - 14]), so in
# the test year it would reveal all but the last 14 answers. It is dropped; the train rows
# hold the ridership history it was computed from.
LEAKY = ["Clark_Lake"]


def prepare(raw: Path, public: Path, private: Path) -> None:
    frame = rdataset("modeldata", "Chicago").drop(columns=["rownames", *LEAKY])
    frame["date"] = pd.to_datetime(frame["date"]).dt.strftime("%Y-%m-%d")
    frame = frame.sort_values("date", kind="stable").reset_index(drop=True)
    features = ["date", *(c for c in frame.columns if c not in (TARGET, "date"))]
    frame = frame[[*features, TARGET]]
    frame.insert(0, ID, range(1, len(frame) + 1))  # time order is the point: no shuffling

    train, test = frame.iloc[:-TEST_DAYS], frame.iloc[-TEST_DAYS:]
    mean = round(float(train[TARGET].mean()), 4)
    write_split(public, private, train, test, id_column=ID, target=TARGET, features=features,
                sample=mean)
