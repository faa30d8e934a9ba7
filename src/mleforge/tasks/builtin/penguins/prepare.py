"""Prepare `penguins`: species of 344 Palmer Archipelago penguins (palmerpenguins)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from mleforge.tasks.sources import palmer_penguins
from mleforge.tasks.splits import shuffled, split_frame, write_csv

SEED = 42
ID = "id"
TARGET = "species"


def prepare(raw: Path, public: Path, private: Path) -> None:
    frame = palmer_penguins().dropna(subset=[TARGET]).reset_index(drop=True)
    features = [c for c in frame.columns if c != TARGET]
    frame = frame[[*features, TARGET]]

    train, test = split_frame(frame, test_fraction=0.25, seed=SEED, stratify=TARGET)
    train = shuffled(train, SEED)
    test = shuffled(test, SEED + 1)
    train.insert(0, ID, range(1, len(train) + 1))
    test.insert(0, ID, range(len(train) + 1, len(train) + len(test) + 1))

    counts = train[TARGET].value_counts()
    majority = sorted(counts[counts == counts.max()].index)[0]
    write_csv(train, public / "train.csv")
    write_csv(test[[ID, *features]], public / "test.csv")
    write_csv(pd.DataFrame({ID: test[ID], TARGET: majority}), public / "sample_submission.csv")
    write_csv(test[[ID, TARGET]], private / "answers.csv")
