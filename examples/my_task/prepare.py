"""Prepare `wine`: the cultivar (0, 1, 2) of 178 Italian wines from 13 chemical measurements.

Written against mleforge's task-author API (mleforge.tasks.authoring), the only mleforge
module a task folder needs.
"""

from mleforge.tasks.authoring import PreparationError, numbered_split, sklearn_dataset, write_split

SEED = 7
ID = "id"
TARGET = "cultivar"


def prepare(raw, public, private):
    frame = sklearn_dataset("wine").rename(columns={"target": TARGET})
    if len(frame) != 178:
        raise PreparationError(f"expected scikit-learn's 178 wines, got {len(frame)}; reinstall scikit-learn")
    features = [c for c in frame.columns if c != TARGET]
    train, test = numbered_split(frame, ID, test_fraction=0.25, seed=SEED, stratify=TARGET)
    majority = int(train[TARGET].mode().min())  # the sample submission: the commonest class
    write_split(public, private, train, test, id_column=ID, target=TARGET, features=features, sample=majority)
