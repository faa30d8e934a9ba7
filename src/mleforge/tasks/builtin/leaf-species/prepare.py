"""Prepare `leaf-species`: identify the species of a leaf from image features (modeldata leaf_id_flavia)."""

from __future__ import annotations

from pathlib import Path

from mleforge.tasks.sources import rdataset
from mleforge.tasks.splits import numbered_split, write_split

SEED = 42
ID = "id"
TARGET = "species"
# Botanical descriptors that the source assigns per species, not per image: each is constant
# within a species and together they name the species for 26 of 28 combinations, so they
# would hand the label over. Only the features measured on each image are kept.
SPECIES_LEVEL = [
    "apex", "base", "shape",
    "denate_edge", "lobed_edge", "smooth_edge", "toothed_edge", "undulate_edge",
]
# Two column names carry typos in the packaged data; upstream modeldata has since fixed them.
RENAME = {"num_max_ponits": "num_max_points", "eccentriciry": "eccentricity"}


def prepare(raw: Path, public: Path, private: Path) -> None:
    frame = rdataset("modeldata", "leaf_id_flavia").drop(columns=["rownames", *SPECIES_LEVEL])
    frame = frame.rename(columns=RENAME)
    frame[TARGET] = frame[TARGET].astype(str).str.replace(" ", "_", regex=False)
    features = [c for c in frame.columns if c != TARGET]
    frame = frame[[*features, TARGET]]

    train, test = numbered_split(frame, ID, test_fraction=0.25, seed=SEED, stratify=TARGET)

    # Naive guess: the three most frequent training species (ties by name).
    counts = train[TARGET].value_counts()
    top3 = sorted(counts.index, key=lambda s: (-counts[s], s))[:3]
    write_split(public, private, train, test, id_column=ID, target=TARGET, features=features,
                sample=" ".join(top3))
