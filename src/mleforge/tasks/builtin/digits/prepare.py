"""Prepare `digits`: 1,797 handwritten digits as 8x8 images (UCI optical recognition of
handwritten digits, bundled with scikit-learn)."""

from __future__ import annotations

from pathlib import Path

from mleforge.tasks.sources import sklearn_dataset
from mleforge.tasks.splits import numbered_split, write_split

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

    train, test = numbered_split(frame, ID, test_fraction=0.25, seed=SEED, stratify=TARGET)

    majority = int(train[TARGET].mode().min())
    write_split(public, private, train, test, id_column=ID, target=TARGET, features=FEATURES,
                sample=majority)
