"""An MLE-bench competition's grade function, loaded as MLE-bench imports it.

A competition's `grade.py` is the module `mlebench.competitions.<id>.grade` of the package
that is the competition's folder, so its relative imports (`from .classes import CLASSES`)
find the folder's own files and its absolute ones (`from mlebench.grade_helpers import
InvalidSubmissionError`) find MLE-bench. That needs the `mlebench` package: the installed
one, or else the checkout of mle-bench that holds the competitions folder
(`<checkout>/mlebench/competitions`), whose `mlebench/__init__.py` is then loaded (its own
dependencies must be installed). Without either, only a grade.py that never imports
`mlebench` can be loaded.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pandas as pd

from mleforge.errors import TaskSpecError
from mleforge.tasks.spec import TaskSpec

COMPETITIONS_ENV = "MLEBENCH_COMPETITIONS_DIR"
# When the mlebench package is not importable, a self-contained grade.py is loaded under this name.
_PRIVATE_ROOT = "_mleforge_mlebench_competitions"


def load_grade_fn(spec: TaskSpec) -> Callable[[pd.DataFrame, Any], Any]:
    """The competition's grade function (`mlebench.competitions.<id>.grade:grade`), imported
    as a module of the package that is its folder (`spec.folder`)."""
    import_string = str(spec.grade_fn)
    config_path = spec.folder / "config.yaml"
    module_name, _, attr = import_string.partition(":")
    package, _, leaf = module_name.rpartition(".")
    if not package or not attr:
        raise TaskSpecError(config_path, "grader.grade_fn", f"{import_string!r}: expected package.module:function")
    importlib.invalidate_caches()  # the folder may be newer than the import system's listings
    try:
        root = _mlebench_package(spec.folder.parent)
        if root is not None:
            name = _attach_package(package, spec.folder)
        else:  # no mlebench: the folder as a package of a private root, for self-contained graders
            name = _attach_package(f"{_PRIVATE_ROOT}.{spec.folder.name}", spec.folder)
        module = importlib.import_module(f"{name}.{leaf}")
    except ModuleNotFoundError as exc:
        if exc.name is not None and exc.name.split(".")[0] == "mlebench":
            raise TaskSpecError(
                config_path, "grader.grade_fn",
                f"{spec.folder / (leaf + '.py')} imports {exc.name}, and no mlebench package is "
                f"importable: install MLE-bench (pip install 'mleforge[mlebench]') or point "
                f"{COMPETITIONS_ENV} at <checkout>/mlebench/competitions of a mle-bench checkout",
            ) from exc
        raise TaskSpecError(config_path, "grader.grade_fn", f"cannot import {import_string}: {exc}") from exc
    except ImportError as exc:
        raise TaskSpecError(config_path, "grader.grade_fn", f"cannot import {import_string}: {exc}") from exc
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise TaskSpecError(config_path, "grader.grade_fn", f"{import_string!r}: {module_name} has no function {attr!r}")
    return fn


def _mlebench_package(competitions_dir: Path) -> ModuleType | None:
    """The `mlebench` package: already imported, installed, or the checkout that holds
    `competitions_dir` (`<checkout>/mlebench/competitions`); None when there is none."""
    if "mlebench" in sys.modules:
        return sys.modules["mlebench"]
    try:
        return importlib.import_module("mlebench")
    except ModuleNotFoundError as exc:
        if exc.name != "mlebench":
            raise
    package_dir = competitions_dir.parent
    init = package_dir / "__init__.py"
    if package_dir.name != "mlebench" or not init.is_file():
        return None
    spec = importlib.util.spec_from_file_location("mlebench", init, submodule_search_locations=[str(package_dir)])
    if spec is None or spec.loader is None:
        return None
    module = importlib.util.module_from_spec(spec)
    sys.modules["mlebench"] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules["mlebench"]
        raise
    return module


def _attach_package(name: str, folder: Path) -> str:
    """Make `name` the package whose one directory is `folder` (a competition folder has no
    `__init__.py`: MLE-bench imports it as a namespace package). A package of that name from
    another folder, and the modules loaded from it, are dropped first. Returns `name`."""
    current = sys.modules.get(name)
    if current is not None and [str(p) for p in getattr(current, "__path__", [])] == [str(folder)]:
        return name
    for loaded in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
        del sys.modules[loaded]
    spec = importlib.machinery.ModuleSpec(name, None, is_package=True)
    spec.submodule_search_locations = [str(folder)]
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    parent_name, _, child = name.rpartition(".")
    parent = sys.modules.get(parent_name)
    if parent is None and parent_name == _PRIVATE_ROOT:
        parent = importlib.util.module_from_spec(importlib.machinery.ModuleSpec(parent_name, None, is_package=True))
        sys.modules[parent_name] = parent
    elif parent is None:
        parent = importlib.import_module(parent_name)
    setattr(parent, child, module)
    return name
