"""Prepare `penguins`: species of 344 Palmer Archipelago penguins (palmerpenguins)."""

from __future__ import annotations

from pathlib import Path

from mleforge.tasks.sources import palmer_penguins
from mleforge.tasks.splits import numbered_split, write_split

SEED = 42
ID = "id"
TARGET = "species"


def prepare(raw: Path, public: Path, private: Path) -> None:
    frame = palmer_penguins().dropna(subset=[TARGET]).reset_index(drop=True)
    features = [c for c in frame.columns if c != TARGET]
    frame = frame[[*features, TARGET]]

    train, test = numbered_split(frame, ID, test_fraction=0.25, seed=SEED, stratify=TARGET)

    counts = train[TARGET].value_counts()
    majority = sorted(counts[counts == counts.max()].index)[0]
    write_split(public, private, train, test, id_column=ID, target=TARGET, features=features,
                sample=majority)
