"""MLE-bench competitions as mleforge tasks (`mlebench:<competition-id>`).

MLE-bench keeps each competition in `<competitions dir>/<id>/` (config.yaml,
grade.py and its helper modules, leaderboard.csv, description.md) and its data
in `<data dir>/<id>/prepared/{public,private}/`. With the `mlebench` package
installed both directories come from its registry; `MLEBENCH_COMPETITIONS_DIR`
and `MLEBENCH_DATA_DIR` override them.

A competition's `grade.py` is loaded as MLE-bench imports it: as the module
`mlebench.competitions.<id>.grade` of the package that is the competition's
folder, so its relative imports (`from .classes import CLASSES`) find the
folder's own files and its absolute ones (`from mlebench.grade_helpers import
InvalidSubmissionError`) find MLE-bench. That needs the `mlebench` package: the
installed one, or else the checkout of mle-bench that holds the competitions
folder (`<checkout>/mlebench/competitions`), whose `mlebench/__init__.py` is
then loaded (its own dependencies must be installed). Without either, only a
grade.py that never imports `mlebench` can be loaded.

Grading then goes field for field as `mlebench.grade.grade_csv`
(`mleforge.grading.grader`); the direction is MLE-bench's `is_lower_better`:
lower is better when the leaderboard's first score is below its last, so a
leaderboard whose scores all tie counts as higher-is-better.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pandas as pd
import yaml

from mleforge.errors import TaskNotFound, TaskSpecError
from mleforge.tasks.spec import Limits, SubmissionFormat, TaskSpec
from mleforge.tasks.task import Task

PREFIX = "mlebench:"
COMPETITIONS_ENV = "MLEBENCH_COMPETITIONS_DIR"
DATA_ENV = "MLEBENCH_DATA_DIR"
# When the mlebench package is not importable, a self-contained grade.py is loaded under this name.
_PRIVATE_ROOT = "_mleforge_mlebench_competitions"


@dataclass(frozen=True)
class MLEBenchSource:
    competitions_dir: Path
    data_dir: Path

    @classmethod
    def discover(cls) -> MLEBenchSource | None:
        """From the environment overrides, else from an installed `mlebench`; None if neither."""
        competitions = os.environ.get(COMPETITIONS_ENV)
        data = os.environ.get(DATA_ENV)
        if not (competitions and data):
            try:
                from mlebench.registry import registry  # the optional [mlebench] extra
            except ImportError:
                return None
            competitions = competitions or str(registry.get_competitions_dir())
            data = data or str(registry.get_data_dir())
        return cls(Path(competitions).expanduser().resolve(), Path(data).expanduser().resolve())

    def ids(self, prepared_only: bool = True) -> list[str]:
        if not self.competitions_dir.is_dir():
            return []
        ids = sorted(p.parent.name for p in self.competitions_dir.glob("*/config.yaml"))
        if prepared_only:
            ids = [i for i in ids if (self.data_dir / i / "prepared" / "private").is_dir()]
        return [PREFIX + i for i in ids]

    def get(self, task_id: str) -> Task:
        competition_id = task_id.removeprefix(PREFIX)
        folder = self.competitions_dir / competition_id
        config_path = folder / "config.yaml"
        if not config_path.is_file():
            raise TaskNotFound(
                f"no MLE-bench competition {competition_id!r} in {self.competitions_dir} "
                f"(set {COMPETITIONS_ENV} or install mlebench: pip install 'mleforge[mlebench]')"
            )
        return self._task(competition_id, folder, config_path)

    def _task(self, competition_id: str, folder: Path, config_path: Path) -> Task:
        config = yaml.safe_load(config_path.read_text(encoding="utf-8")) or {}
        try:
            dataset = config["dataset"]
            answers = self.data_dir / dataset["answers"]
            sample = self.data_dir / dataset["sample_submission"]
            grade_fn = str(config["grader"]["grade_fn"])
        except (KeyError, TypeError) as exc:
            raise TaskSpecError(config_path, str(exc).strip("'"), "missing; MLE-bench's config.yaml needs it") from None
        leaderboard_path = folder / "leaderboard.csv"
        is_lower_better = False
        if leaderboard_path.is_file():
            scores = pd.read_csv(leaderboard_path)["score"]
            is_lower_better = bool(scores.iloc[0] < scores.iloc[-1])  # Grader.is_lower_better
        header = pd.read_csv(sample, nrows=0).columns.tolist() if sample.is_file() else ["id", "target"]
        description_path = folder / "description.md"
        if not description_path.is_file():
            description_path = config_path
        public = self.data_dir / competition_id / "prepared" / "public"
        spec = TaskSpec(
            id=PREFIX + competition_id,
            name=str(config.get("name", competition_id)),
            folder=folder,
            description_path=description_path,
            modality=str(config.get("competition_type", "other")),
            problem="other",
            metric=None,
            grade_fn=grade_fn,
            direction="lower" if is_lower_better else "higher",
            preparer=str(config.get("preparer", "prepare:prepare")),
            target=infer_target(public, [str(c) for c in header]),
            submission=SubmissionFormat(str(header[0]), tuple(str(c) for c in header[1:])),
            limits=Limits(timeout_s=float(os.environ.get("MLEBENCH_TIMEOUT_S", 32400))),
            tags=("mlebench",),
            source=f"MLE-bench competition {competition_id}",
        )
        return Task(
            spec=spec,
            kind="mlebench",
            data_dir=self.data_dir / competition_id,
            answers_path=answers,
            sample_submission_path=sample,
            leaderboard_path=leaderboard_path,
        )


def infer_target(public_dir: Path, sample_header: list[str]) -> str | None:
    """The label column of a competition's train.csv, which MLE-bench's config does not name:
    the sample submission's one prediction column if train.csv has it, else the one column
    of train.csv that test.csv lacks; None when neither says (images, several targets)."""
    train_path, test_path = public_dir / "train.csv", public_dir / "test.csv"
    if not train_path.is_file():
        return None
    train_columns = [str(c) for c in pd.read_csv(train_path, nrows=0).columns]
    predicted = sample_header[1:]
    if len(predicted) == 1 and predicted[0] in train_columns:
        return predicted[0]
    if test_path.is_file():
        test_columns = {str(c) for c in pd.read_csv(test_path, nrows=0).columns}
        only_in_train = [c for c in train_columns if c not in test_columns]
        if len(only_in_train) == 1:
            return only_in_train[0]
    return None


# --- loading a competition's grade function -----------------------------------------------------


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
