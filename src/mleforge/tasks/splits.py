"""Helpers that task preparers use so that preparation is deterministic byte for byte:
seeded splits, seeded row orders and ids, and CSV files written the same way every time."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd


def split_frame(
    frame: pd.DataFrame,
    test_fraction: float,
    seed: int,
    stratify: str | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """A seeded random train/test split (stratified on a column if given); index reset."""
    from sklearn.model_selection import train_test_split

    labels = frame[stratify] if stratify else None
    train, test = train_test_split(
        frame, test_size=test_fraction, random_state=seed, stratify=labels, shuffle=True
    )
    return train.reset_index(drop=True), test.reset_index(drop=True)


def shuffled(frame: pd.DataFrame, seed: int) -> pd.DataFrame:
    """Rows in a seeded random order, so that ids carry no information about the target."""
    order = np.random.default_rng(seed).permutation(len(frame))
    return frame.iloc[order].reset_index(drop=True)


def write_csv(frame: pd.DataFrame, path: Path) -> None:
    """Write a CSV the same way every time: no index, `\\n` line ends, UTF-8."""
    path.parent.mkdir(parents=True, exist_ok=True)
    frame.to_csv(path, index=False, lineterminator="\n", encoding="utf-8")


def numbered(train: pd.DataFrame, test: pd.DataFrame, id_column: str, seed: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Both parts in a seeded random order (train with `seed`, test with `seed + 1`), then
    numbered in a first column `id_column`: train 1..n, test n+1..n+m."""
    train, test = shuffled(train, seed), shuffled(test, seed + 1)
    train.insert(0, id_column, range(1, len(train) + 1))
    test.insert(0, id_column, range(len(train) + 1, len(train) + len(test) + 1))
    return train, test


def numbered_split(
    frame: pd.DataFrame,
    id_column: str,
    *,
    test_fraction: float,
    seed: int,
    stratify: str | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """`split_frame`, then `numbered`: the usual train and test parts of a built-in task."""
    train, test = split_frame(frame, test_fraction=test_fraction, seed=seed, stratify=stratify)
    return numbered(train, test, id_column, seed)


def write_split(
    public: Path,
    private: Path,
    train: pd.DataFrame,
    test: pd.DataFrame,
    *,
    id_column: str,
    target: str,
    features: Sequence[str],
    sample: Any,
    answers: pd.DataFrame | None = None,
) -> None:
    """A task's four files: public train.csv (every column), test.csv (the id and `features`)
    and sample_submission.csv (`sample`: one constant prediction for every row, or the whole
    frame), and private answers.csv (`answers`, by default the test rows' id and `target`)."""
    if not isinstance(sample, pd.DataFrame):
        sample = pd.DataFrame({id_column: test[id_column], target: sample})
    write_csv(train, public / "train.csv")
    write_csv(test[[id_column, *features]], public / "test.csv")
    write_csv(sample, public / "sample_submission.csv")
    write_csv(test[[id_column, target]] if answers is None else answers, private / "answers.csv")
