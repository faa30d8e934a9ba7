"""What a script needs to know of a task: its formats, metric and the roles of its columns.

`task_profile(task)` reads the task's public train.csv once (cached by file and
modification time) into a `TaskProfile`; the script writer, the catalog and the
stage choices read only the profile, never the task.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import Any

import pandas as pd

from mleforge.errors import ConfigError
from mleforge.grading.metrics import get_metric
from mleforge.reference.features import infer_roles
from mleforge.reference.solutions import MANY_CLASSES, WIDE_COLUMNS
from mleforge.tasks.task import Task

ROLES = ("numeric", "categorical", "text", "date")


@dataclass(frozen=True)
class TaskProfile:
    """What a script needs to know of a task: formats, metric, and its columns' roles
    (as `mleforge.reference.features.infer_roles` assigns them; the script re-derives them)."""

    task_id: str
    name: str
    modality: str
    problem: str
    metric: str | None  # a named metric; None when the task grades with its own function
    output: str  # label | int_label | probability | class_probabilities | number | ranking
    k: int | None  # map@K's K
    target: str
    id_column: str
    target_columns: tuple[str, ...]
    rows: int
    classes: int  # distinct training targets; 0 for regression
    category_levels: int = 0  # one-hot columns the categorical columns make, about
    numeric: tuple[str, ...] = ()
    categorical: tuple[str, ...] = ()
    text: tuple[str, ...] = ()
    date: tuple[str, ...] = ()

    @property
    def roles(self) -> dict[str, tuple[str, ...]]:
        return {role: getattr(self, role) for role in ROLES}

    @property
    def classification(self) -> bool:
        return self.problem != "regression"

    @property
    def wide(self) -> bool:
        """Many pixel columns: distance, boosting and neural models then work on PCA."""
        return self.modality == "image" and len(self.numeric) > WIDE_COLUMNS

    @property
    def many_classes(self) -> bool:
        return self.classes >= MANY_CLASSES

    def has(self, role: str) -> bool:
        return bool(getattr(self, role))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _output_kind(problem: str, metric_name: str | None, targets: tuple[str, ...]) -> tuple[str, int | None]:
    if metric_name is None:  # a task's own grade function: guess the form from the problem
        if problem == "regression":
            return "number", None
        return ("class_probabilities" if len(targets) > 1 else "label"), None
    metric = get_metric(metric_name)
    if metric.kind == "label":
        return ("int_label" if metric.name == "qwk" else "label"), None
    if metric.kind == "probability":
        return ("class_probabilities" if len(targets) > 1 else "probability"), None
    return metric.kind, metric.k  # number | ranking


def task_profile(task: Task) -> TaskProfile:
    """Read the task's public train.csv (cached by file and modification time) into a profile.

    The template expert predicts one label column of train.csv. An `mlebench:` task gets one
    where the sample submission names it (`tasks.mlebench.infer_target`); where none can be
    inferred (images, several targets) the expert cannot write a script, and says so."""
    if not task.spec.target:
        predicted = ", ".join(task.spec.submission.target_columns) or "none"
        raise ConfigError(
            f"the template expert cannot solve task {task.id}: it predicts one label column of "
            f"train.csv, and none could be inferred (the sample submission predicts: {predicted}; "
            "no single one of them is a train.csv column). Use a model policy for this task."
        )
    path = task.public_dir / "train.csv"
    stat = path.stat()
    return _profile(task, str(path), stat.st_mtime_ns, stat.st_size)


@lru_cache(maxsize=64)
def _profile(task: Task, path: str, mtime_ns: int, size: int) -> TaskProfile:
    spec = task.spec
    train = pd.read_csv(path)
    roles = infer_roles(spec, train)
    output, k = _output_kind(spec.problem, spec.metric, spec.submission.target_columns)
    classes = 0 if spec.problem == "regression" else int(train[spec.target].nunique())
    return TaskProfile(
        task_id=spec.id, name=spec.name, modality=spec.modality, problem=spec.problem,
        metric=spec.metric, output=output, k=k, target=spec.target or "",
        id_column=spec.submission.id_column, target_columns=spec.submission.target_columns,
        rows=len(train), classes=classes,
        # The one-hot encoder keeps at most 30 columns per feature, one of them for rare levels.
        category_levels=sum(min(30, int(train[c].nunique()) + 1) for c in roles.categorical),
        **{role: tuple(getattr(roles, role)) for role in ROLES},
    )
