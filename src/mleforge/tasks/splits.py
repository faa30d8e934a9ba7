"""Helpers that task preparers use so that preparation is deterministic byte for byte."""

from __future__ import annotations

from pathlib import Path

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
