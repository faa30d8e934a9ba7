"""A leaderboard's rows built in this process: the reference grid fit on a task's public
data and scored on its private answers, best first.

`mleforge.reference.leaderboard` calls it directly (unpinned) or through the pinned child
process (`mleforge.reference.pinned`), which calls it in turn.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Collection

import pandas as pd

from mleforge.errors import ConfigError, InvalidSubmission
from mleforge.grading.grader import score_frame
from mleforge.reference.solutions import ReferenceSolution, solution_grid
from mleforge.tasks.preparation import prepare, read_public
from mleforge.tasks.task import Task

Progress = Callable[[int, int, str], None]  # (entries done, entries in all, entry just scored)


def build_here(task: Task, progress: Progress | None = None, entries: Collection[str] | None = None) -> pd.DataFrame:
    """The build itself, in this process: the whole grid, or only the `entries` named."""
    from joblib import Memory

    prepare(task)
    grid = select_entries(task, solution_grid(task), entries)
    train, test = read_public(task)
    rows = []
    # Most entries share their features (a TF-IDF costs seconds): fit them once per build.
    with tempfile.TemporaryDirectory(prefix="mleforge-features-") as cache:
        memory = Memory(cache, verbose=0)
        for done, solution in enumerate(grid, start=1):
            rows.append({"entry": solution.name, "score": _score(task, solution, train, test, memory)})
            if progress is not None:
                progress(done, len(grid), solution.name)
    return sort_board(pd.DataFrame(rows, columns=["entry", "score"]), task.is_lower_better)


def select_entries(
    task: Task, grid: list[ReferenceSolution], entries: Collection[str] | None
) -> list[ReferenceSolution]:
    """The grid's solutions named in `entries`, in grid order (None: all of them); a name the
    grid lacks is a ConfigError that lists the names it has."""
    if entries is None:
        return grid
    names = {s.name for s in grid}
    unknown = sorted(set(entries) - names)
    if unknown:
        raise ConfigError(f"{task.id}'s reference grid has no entry {', '.join(unknown)}; "
                          f"its entries: {', '.join(sorted(names))}")
    return [s for s in grid if s.name in set(entries)]


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
