"""A Task: a spec plus where its data and leaderboard live."""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import pandas as pd

from mleforge.errors import DataNotPrepared, TaskSpecError
from mleforge.tasks.loading import load_callable
from mleforge.tasks.mlebench_grade import load_grade_fn
from mleforge.tasks.spec import TaskSpec


@dataclass(frozen=True)
class Task:
    """One competition-like problem.

    `kind` is `builtin`, `folder` (a user's task folder) or `mlebench`. Built-in
    and folder tasks keep their data under `<data root>/<id>/prepared/`;
    MLE-bench competitions under MLE-bench's own data directory.
    """

    spec: TaskSpec
    kind: str
    data_dir: Path  # <root>/<id>
    answers_path: Path
    sample_submission_path: Path
    leaderboard_path: Path

    @property
    def id(self) -> str:
        return self.spec.id

    @property
    def public_dir(self) -> Path:
        return self.data_dir / "prepared" / "public"

    @property
    def private_dir(self) -> Path:
        return self.data_dir / "prepared" / "private"

    @property
    def public_answers_path(self) -> Path:
        """The public part of the answers (Kaggle's public leaderboard rows): what the agent's
        feedback is graded on. Written by the preparation; `mlebench:` tasks have none on
        disk (their public part is a seeded subset chosen when grading)."""
        return self.answers_path.parent / "public_answers.csv"

    @property
    def private_answers_path(self) -> Path:
        """The private part of the answers: what the final grade of a built-in or folder task
        is computed on."""
        return self.answers_path.parent / "private_answers.csv"

    @property
    def is_lower_better(self) -> bool:
        return self.spec.is_lower_better

    def description(self) -> str:
        return self.spec.description_path.read_text(encoding="utf-8")

    def leaderboard(self) -> pd.DataFrame:
        """The leaderboard (a `score` column, best first)."""
        path = self.leaderboard_path
        if not path.is_file():
            hint = (f"build it with: mleforge tasks leaderboard {self.id}{cli_task_args(self, data_dir=True)}"
                    if self.kind != "mlebench" else "")
            raise DataNotPrepared(f"task {self.id} has no leaderboard at {path}. {hint}".strip())
        board = pd.read_csv(path)
        if "score" not in board.columns or board["score"].isna().any() or len(board) == 0:
            raise TaskSpecError(path, "score", "a leaderboard needs a non-empty `score` column without gaps")
        return board

    @cached_property
    def grade_callable(self) -> Callable[[pd.DataFrame, pd.DataFrame], Any] | None:
        """The task's own grade function, or None when it uses a named metric."""
        if self.spec.grade_fn is None:
            return None
        if self.kind == "mlebench":
            return load_grade_fn(self.spec)
        return load_callable(self.spec.grade_fn, self.spec.folder, self.spec.folder / "task.yaml", "grade_fn")

    def to_dict(self) -> dict[str, Any]:
        return {**self.spec.to_dict(), "kind": self.kind, "data_dir": str(self.data_dir)}


def cli_task_args(task: Task, data_dir: bool = False) -> str:
    """The options a command needs to find this task again, for hints that name a command:
    ` --tasks-dir <folder>` for a task from a folder, and with `data_dir` ` --data-dir <root>`
    when its data lives under another root than the default one."""
    from mleforge.paths import data_root

    args = ""
    if task.kind == "folder":
        args += f" --tasks-dir {shlex.quote(str(task.spec.folder))}"
    if data_dir and task.kind != "mlebench" and task.data_dir.parent != data_root():
        args += f" --data-dir {shlex.quote(str(task.data_dir.parent))}"
    return args


def local_task(spec: TaskSpec, kind: str, root: Path) -> Task:
    data_dir = root / spec.id
    prepared = data_dir / "prepared"
    return Task(
        spec=spec,
        kind=kind,
        data_dir=data_dir,
        answers_path=prepared / "private" / "answers.csv",
        sample_submission_path=prepared / "public" / "sample_submission.csv",
        leaderboard_path=spec.leaderboard_path,
    )
