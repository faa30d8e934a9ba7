"""Built-in leaderboards: the scores of a seeded grid of reference solutions.

There is no Kaggle leaderboard for the built-in tasks, so each task's
`leaderboard.csv` (`entry,score`, best first) records how the grid of
`mleforge.reference.solutions` scores on its test set, and
`leaderboard.meta.json` the library versions that produced it. Rebuilding
with the same versions gives the same file byte for byte; `check_leaderboard`
says where a rebuild differs.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path

import pandas as pd

from mleforge.errors import InvalidSubmission
from mleforge.grading.grader import SCORE_DECIMALS, score_frame
from mleforge.reference.solutions import ReferenceSolution, solution_grid
from mleforge.tasks.preparation import prepare
from mleforge.tasks.task import Task
from mleforge.utils.io import read_public

META_NAME = "leaderboard.meta.json"
LIBRARIES = ("numpy", "pandas", "scikit-learn", "scipy")
# When the libraries differ from those recorded, floating-point paths differ slightly;
# a rebuild then matches if every score is within this absolute distance.
TOLERANCE = 2e-3

Progress = Callable[[int, int, str], None]  # (entries done, entries in all, entry just scored)


def library_versions() -> dict[str, str]:
    return {name: version(name) for name in LIBRARIES}


def build_leaderboard(task: Task, progress: Progress | None = None) -> pd.DataFrame:
    """Run every entry of the task's grid on its public data and score it on the private answers.

    An invalid submission here is a bug in the catalog, so it is raised, naming the entry.
    """
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
        return score_frame(task, submission)
    except InvalidSubmission as exc:
        raise InvalidSubmission(f"reference solution {solution.name} of {task.id}: {exc.reason}") from exc


def sort_board(board: pd.DataFrame, is_lower_better: bool) -> pd.DataFrame:
    """Best score first; equal scores in entry-name order."""
    board = board.sort_values("entry", kind="stable")
    board = board.sort_values("score", ascending=is_lower_better, kind="stable")
    return board.reset_index(drop=True)


def format_score(score: float) -> str:
    """Scores are already rounded to SCORE_DECIMALS: write exactly that many, always."""
    return f"{float(score):.{SCORE_DECIMALS}f}"


def render_board(board: pd.DataFrame) -> str:
    lines = ["entry,score", *(f"{e},{format_score(s)}" for e, s in zip(board["entry"], board["score"]))]
    return "\n".join(lines) + "\n"


def meta_path(task: Task) -> Path:
    return task.spec.leaderboard_path.with_name(META_NAME)


def write_leaderboard(task: Task, board: pd.DataFrame) -> Path:
    """Write `leaderboard.csv` and `leaderboard.meta.json` in the task's folder; returns the CSV."""
    path = task.spec.leaderboard_path
    path.write_text(render_board(board), encoding="utf-8")
    meta = {
        "task": task.id,
        "metric": task.spec.metric_name,
        "direction": task.spec.direction,
        "entries": len(board),
        "command": f"mleforge tasks leaderboard {task.id}",
        "versions": library_versions(),
    }
    meta_path(task).write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return path


def compare_boards(
    committed: pd.DataFrame, rebuilt: pd.DataFrame, exact: bool, tolerance: float = TOLERANCE
) -> list[str]:
    """The differences between two boards: entries missing or added, and scores that differ
    (at all when `exact`, else by more than `tolerance`)."""
    old = dict(zip(committed["entry"].astype(str), committed["score"].astype(float)))
    new = dict(zip(rebuilt["entry"].astype(str), rebuilt["score"].astype(float)))
    diffs = [f"entry {e} is missing from the rebuild" for e in sorted(set(old) - set(new))]
    diffs += [f"entry {e} is new in the rebuild" for e in sorted(set(new) - set(old))]
    for entry in sorted(set(old) & set(new)):
        a, b = old[entry], new[entry]
        same = format_score(a) == format_score(b) if exact else abs(a - b) <= tolerance
        if not same:
            diffs.append(f"entry {entry}: committed {format_score(a)}, rebuilt {format_score(b)}")
    return diffs


def check_leaderboard(task: Task, progress: Progress | None = None) -> list[str]:
    """Rebuild the leaderboard and list how it differs from the committed one ([] = the same).

    Scores must match exactly when the library versions equal those in the meta file,
    else within `TOLERANCE`.
    """
    path = task.spec.leaderboard_path
    if not path.is_file():
        return [f"no committed leaderboard at {path}; build it with: mleforge tasks leaderboard {task.id}"]
    committed = pd.read_csv(path)
    recorded = {}
    if meta_path(task).is_file():
        recorded = json.loads(meta_path(task).read_text(encoding="utf-8")).get("versions", {})
    exact = recorded == library_versions()
    rebuilt = build_leaderboard(task, progress)
    diffs = compare_boards(committed, rebuilt, exact)
    if exact and not diffs and render_board(rebuilt) != path.read_text(encoding="utf-8"):
        diffs.append(f"{path.name} is not in canonical form (order or formatting); rebuild it")
    return diffs
