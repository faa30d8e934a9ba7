"""A leaderboard's rows built in this process: the reference grid fit on a task's public
data and scored on its private answers, best first.

`mleforge.reference.leaderboard` calls it directly (unpinned) or through the pinned child
process (`mleforge.reference.pinned`), which calls it in turn.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable

import pandas as pd

from mleforge.errors import InvalidSubmission
from mleforge.grading.grader import score_frame
from mleforge.reference.solutions import ReferenceSolution, solution_grid
from mleforge.tasks.preparation import prepare, read_public
from mleforge.tasks.task import Task

Progress = Callable[[int, int, str], None]  # (entries done, entries in all, entry just scored)


def build_here(task: Task, progress: Progress | None = None) -> pd.DataFrame:
    """The build itself, in this process."""
    from joblib import Memory

    prepare(task)
    train, test = read_public(task)
    grid = solution_grid(task)
    rows = []
    # Most entries share their features (a TF-IDF costs seconds): fit them once per build.
    with tempfile.TemporaryDirectory(prefix="mleforge-features-") as cache:
        memory = Memory(cache, verbose=0)
        for done, solution in enumerate(grid, start=1):
            rows.append({"entry": solution.name, "score": _score(task, solution, train, test, memory)})
            if progress is not None:
                progress(done, len(grid), solution.name)
    return sort_board(pd.DataFrame(rows, columns=["entry", "score"]), task.is_lower_better)


def _score(task: Task, solution: ReferenceSolution, train: pd.DataFrame, test: pd.DataFrame, memory) -> float:
    submission = solution.fit_predict(task, train, test, memory=memory)
    try:
        return score_frame(task, submission, "private")
    except InvalidSubmission as exc:
        raise InvalidSubmission(f"reference solution {solution.name} of {task.id}: {exc.reason}") from exc


def sort_board(board: pd.DataFrame, is_lower_better: bool) -> pd.DataFrame:
    """Best score first; equal scores in entry-name order."""
    board = board.sort_values("entry", kind="stable")
    board = board.sort_values("score", ascending=is_lower_better, kind="stable")
    return board.reset_index(drop=True)
