"""Prepare `breast-cancer`: malignant vs benign tumours from 569 digitized biopsy images
(Breast Cancer Wisconsin (Diagnostic), bundled with scikit-learn)."""

from __future__ import annotations

from pathlib import Path

from mleforge.tasks.sources import sklearn_dataset
from mleforge.tasks.splits import numbered_split, write_split

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

    train, test = numbered_split(frame, ID, test_fraction=0.25, seed=SEED, stratify=TARGET)

    prior = round(float(train[TARGET].mean()), 6)
    write_split(public, private, train, test, id_column=ID, target=TARGET, features=features,
                sample=prior)
