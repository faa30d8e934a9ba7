"""Prepare `digits`: 1,797 handwritten digits as 8x8 images (UCI optical recognition of
handwritten digits, bundled with scikit-learn)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from mleforge.tasks.sources import sklearn_dataset
from mleforge.tasks.splits import shuffled, split_frame, write_csv

SEED = 42
ID = "id"
TARGET = "label"
FEATURES = [f"pixel_{i}" for i in range(64)]


def prepare(raw: Path, public: Path, private: Path) -> None:
    source = sklearn_dataset("digits")
    # scikit-learn names the columns pixel_<row>_<col>, row-major; flatten to pixel_<row*8+col>.
    pixels = [f"pixel_{r}_{c}" for r in range(8) for c in range(8)]
    frame = source[pixels].astype("int64")
    frame.columns = FEATURES
    frame[TARGET] = source["target"].astype("int64")

    train, test = split_frame(frame, test_fraction=0.25, seed=SEED, stratify=TARGET)
    train = shuffled(train, SEED)
    test = shuffled(test, SEED + 1)
    train.insert(0, ID, range(1, len(train) + 1))
    test.insert(0, ID, range(len(train) + 1, len(train) + len(test) + 1))

    majority = int(train[TARGET].mode().min())
    write_csv(train, public / "train.csv")
    write_csv(test[[ID, *FEATURES]], public / "test.csv")
    write_csv(pd.DataFrame({ID: test[ID], TARGET: majority}), public / "sample_submission.csv")
    write_csv(test[[ID, TARGET]], private / "answers.csv")
