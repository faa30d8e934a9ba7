"""Reading a task's public data."""

from __future__ import annotations

import pandas as pd

from mleforge.tasks.preparation import require_prepared
from mleforge.tasks.task import Task


def read_public(task: Task) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The prepared train and test frames of a task (verified first)."""
    require_prepared(task)
    train = pd.read_csv(task.public_dir / "train.csv")
    test = pd.read_csv(task.public_dir / "test.csv")
    return train, test
