"""Prepare `breast-cancer`: malignant vs benign tumours from 569 digitized biopsy images
(Breast Cancer Wisconsin (Diagnostic), bundled with scikit-learn)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from mleforge.tasks.sources import sklearn_dataset
from mleforge.tasks.splits import shuffled, split_frame, write_csv

SEED = 42
ID = "id"
TARGET = "diagnosis"


def prepare(raw: Path, public: Path, private: Path) -> None:
    frame = sklearn_dataset("breast_cancer")
    # scikit-learn codes 0 = malignant, 1 = benign; this task's positive class is malignant.
    frame[TARGET] = (frame["target"] == 0).astype("int64")
    frame = frame.drop(columns=["target"])
    frame.columns = [c.strip().replace(" ", "_") for c in frame.columns]
    features = [c for c in frame.columns if c != TARGET]

    train, test = split_frame(frame, test_fraction=0.25, seed=SEED, stratify=TARGET)
    train = shuffled(train, SEED)
    test = shuffled(test, SEED + 1)
    train.insert(0, ID, range(1, len(train) + 1))
    test.insert(0, ID, range(len(train) + 1, len(train) + len(test) + 1))

    prior = round(float(train[TARGET].mean()), 6)
    write_csv(train, public / "train.csv")
    write_csv(test[[ID, *features]], public / "test.csv")
    write_csv(pd.DataFrame({ID: test[ID], TARGET: prior}), public / "sample_submission.csv")
    write_csv(test[[ID, TARGET]], private / "answers.csv")
