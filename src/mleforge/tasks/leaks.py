"""Answers that a preparer left in the public test file under another column name.

The preparation check refuses a target column kept in `public/test.csv` by its own name;
a copy renamed (`Survived` as `label`, a target joined back under its source's name) is
as much a leak, and only the values tell it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd


def _same_values(a: pd.Series, b: pd.Series) -> bool:
    """Equal row for row: as numbers when both are numeric, else as stripped text."""
    if a.isna().any() or b.isna().any():
        return bool(((a.isna() == b.isna()).all()) and _same_values(a[a.notna()], b[b.notna()]))
    x, y = pd.to_numeric(a, errors="coerce"), pd.to_numeric(b, errors="coerce")
    if x.notna().all() and y.notna().all():
        return bool(np.array_equal(x.to_numpy(dtype=float), y.to_numpy(dtype=float)))
    return bool((a.astype(str).str.strip().to_numpy() == b.astype(str).str.strip().to_numpy()).all())


def renamed_target_columns(
    test: pd.DataFrame, answers: pd.DataFrame, id_column: str, target_columns: Sequence[str]
) -> list[tuple[str, str]]:
    """The (test column, answers column) pairs whose values, aligned by id, are the answers'
    target exactly. A target with a single distinct value is skipped (any constant column
    would match it, and it tells nothing)."""
    if id_column not in test.columns or id_column not in answers.columns:
        return []
    merged = answers[[id_column, *target_columns]].merge(
        test, on=id_column, how="inner", suffixes=("", "__test"), validate="one_to_one")
    if len(merged) != len(answers):
        return []  # not the same ids: the preparation check reports that
    found = []
    for target in target_columns:
        truth = merged[target].reset_index(drop=True)
        if truth.nunique(dropna=False) < 2:
            continue
        for column in test.columns:
            if column == id_column:
                continue
            name = f"{column}__test" if column in target_columns else column
            if _same_values(merged[name].reset_index(drop=True), truth):
                found.append((str(column), str(target)))
    return found
