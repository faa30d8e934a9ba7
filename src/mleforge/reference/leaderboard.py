"""Built-in leaderboards: the scores of a seeded grid of reference solutions.

There is no Kaggle leaderboard for the built-in tasks, so each task's
`leaderboard.csv` (`entry,score`, best first) records how the grid of
`mleforge.reference.solutions` scores on the private part of its test set (Kaggle's
private leaderboard: what final grades are ranked against), and
`leaderboard.meta.json` what produced it: the library versions, the numerical
environment (`mleforge.reference.numerics`: the pin, the BLAS kernels, numpy's
SIMD targets) and the CPU.

A build runs in a child process pinned to the same floating-point paths on every
x86-64-v3 CPU. `check_leaderboard` rebuilds and compares: exactly when the versions
and the numerical environment equal the recorded ones (the same file byte for byte),
else within `score_tolerance` of each committed score: `TOLERANCE_ROWS` test rows for
accuracy-like metrics (a score that moves by whole rows), `RELATIVE_TOLERANCE` of the
score for the others. Either way an entry added, lost or moved by more is reported.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable, Collection
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pandas as pd

from mleforge.errors import ConfigError
from mleforge.grading.grader import SCORE_DECIMALS, part_rows
from mleforge.reference.board import Progress, build_here, sort_board
from mleforge.reference.numerics import cpu_info, pinned_environment, unpinned_environment
from mleforge.reference.pinned import build_in_child
from mleforge.tasks.preparation import prepare
from mleforge.tasks.task import Task, cli_task_args

META_NAME = "leaderboard.meta.json"
LIBRARIES = ("numpy", "pandas", "scikit-learn", "scipy")
# Where exactness cannot be claimed: an accuracy-like score (accuracy, macro F1, QWK, MAP@k)
# may move by this many test rows (1/n each: one flipped prediction; a real change of the
# grid or of a recipe moves many rows), any other score by this fraction of itself (the
# drift seen between CPUs is in the fourth significant digit at most).
TOLERANCE_ROWS = 2
RELATIVE_TOLERANCE = 1e-3
# The smallest difference a 5-decimal score can show.
ONE_UNIT = 10.0**-SCORE_DECIMALS


def library_versions() -> dict[str, str]:
    return {name: version(name) for name in LIBRARIES}


def build_leaderboard(
    task: Task, progress: Progress | None = None, pinned: bool = True, entries: Collection[str] | None = None
) -> pd.DataFrame:
    """Run every entry of the task's grid (or only the `entries` named) on its public data and
    score it on the private answers.

    `pinned` (the default) builds in a child process with the pinned numerical environment
    (unpinned, with one thread, where the CPU cannot take the pin); `pinned=False` builds
    here, in this process's environment. The board's `attrs["numerics"]` says which
    environment computed it. An invalid submission here is a bug in the catalog, so it is
    raised, naming the entry.
    """
    from mleforge.reference.numerics import numerics

    prepare(task)
    if not pinned:
        board = build_here(task, progress, entries)
        board.attrs["numerics"] = numerics()
        return board
    env = pinned_environment() or unpinned_environment()
    rows, child_numerics = build_in_child(task, env, progress, entries)
    board = sort_board(pd.DataFrame(rows, columns=["entry", "score"]), task.is_lower_better)
    board.attrs["numerics"] = child_numerics
    return board


def format_score(score: float) -> str:
    """Scores are already rounded to SCORE_DECIMALS: write exactly that many, always."""
    return f"{float(score) + 0.0:.{SCORE_DECIMALS}f}"


def render_board(board: pd.DataFrame) -> str:
    lines = ["entry,score", *(f"{e},{format_score(s)}" for e, s in zip(board["entry"], board["score"]))]
    return "\n".join(lines) + "\n"


def meta_path(task: Task) -> Path:
    return task.spec.leaderboard_path.with_name(META_NAME)


def leaderboard_command(task: Task) -> str:
    """The command that rebuilds the task's board (with --tasks-dir when it came from one)."""
    return f"mleforge tasks leaderboard {shlex.quote(task.id)}{cli_task_args(task)}"


def write_leaderboard(task: Task, board: pd.DataFrame) -> Path:
    """Write `leaderboard.csv` and `leaderboard.meta.json` in the task's folder; returns the CSV."""
    from mleforge.reference.numerics import numerics

    path = task.spec.leaderboard_path
    path.write_text(render_board(board), encoding="utf-8")
    meta = {
        "task": task.id,
        "metric": task.spec.metric_name,
        "direction": task.spec.direction,
        "entries": len(board),
        # Kaggle's private leaderboard: the rows final grades are scored on (tasks.answer_split).
        "scored_on": {"part": "private", "rows": part_rows(task, "private")},
        "command": leaderboard_command(task),
        "versions": library_versions(),
        "numerics": board.attrs.get("numerics") or numerics(),
        "cpu": cpu_info(),
    }
    meta_path(task).write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return path


def score_tolerance(task: Task, test_rows: int | None = None) -> Callable[[float], float]:
    """How far a rebuilt score may be from the committed one where exactness cannot be claimed:
    `TOLERANCE_ROWS` test rows (each worth 1/n) for accuracy-like named metrics, else
    `RELATIVE_TOLERANCE` of the score; never under one unit of the 5th decimal."""
    from mleforge.grading.metrics import get_metric

    kind = get_metric(task.spec.metric).kind if task.spec.metric else None
    if kind in ("label", "ranking"):
        n = test_rows if test_rows is not None else part_rows(task, "private")
        rows = TOLERANCE_ROWS / n
        return lambda score: max(rows, ONE_UNIT)
    return lambda score: max(RELATIVE_TOLERANCE * abs(score), ONE_UNIT)


def compare_boards(
    committed: pd.DataFrame, rebuilt: pd.DataFrame, exact: bool,
    tolerance: Callable[[float], float] | None = None,
) -> list[str]:
    """The differences between two boards: entries missing or added, and scores that differ
    (at all when `exact`, else by more than `tolerance(committed score)`)."""
    old = dict(zip(committed["entry"].astype(str), committed["score"].astype(float)))
    new = dict(zip(rebuilt["entry"].astype(str), rebuilt["score"].astype(float)))
    diffs = [f"entry {e} is missing from the rebuild" for e in sorted(set(old) - set(new))]
    diffs += [f"entry {e} is new in the rebuild" for e in sorted(set(new) - set(old))]
    for entry in sorted(set(old) & set(new)):
        a, b = old[entry], new[entry]
        if exact or tolerance is None:
            if format_score(a) != format_score(b):
                diffs.append(f"entry {entry}: committed {format_score(a)}, rebuilt {format_score(b)}")
        elif abs(a - b) > tolerance(a) + 1e-12:  # 1e-12: the scores themselves are 5-decimal floats
            diffs.append(f"entry {entry}: committed {format_score(a)}, rebuilt {format_score(b)} "
                         f"(off by {abs(a - b):.5f}, over the tolerance {tolerance(a):.5f})")
    return diffs


def spread_entries(board: pd.DataFrame, k: int) -> list[str]:
    """`k` entries of a board (best first) spread over its ranks: the best, the worst and
    evenly between (all of them when it has no more than k)."""
    if k < 1:
        raise ConfigError(f"a sample of the leaderboard needs at least 1 entry, got {k}")
    names = board["entry"].astype(str).tolist()
    if len(names) <= k:
        return names
    if k == 1:
        return names[:1]
    ranks = sorted({round(i * (len(names) - 1) / (k - 1)) for i in range(k)})
    return [names[r] for r in ranks]


def read_meta(task: Task) -> dict[str, Any]:
    path = meta_path(task)
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def check_leaderboard(
    task: Task, progress: Progress | None = None, pinned: bool = True, sample: int | None = None
) -> list[str]:
    """Rebuild the leaderboard and list how it differs from the committed one ([] = the same).

    Scores must match exactly when the library versions and the numerical environment equal
    those in the meta file, else within `score_tolerance`. `sample=k` rebuilds only k entries
    spread over the committed board (`spread_entries`: the best, the worst and evenly
    between) and compares those: a quicker check that still spans every score range.
    """
    path = task.spec.leaderboard_path
    if not path.is_file():
        return [f"no committed leaderboard at {path}; build it with: {leaderboard_command(task)}"]
    committed = pd.read_csv(path)
    recorded = read_meta(task)
    entries = None
    if sample is not None:
        entries = spread_entries(committed, sample)
        committed = committed[committed["entry"].isin(entries)].reset_index(drop=True)
    rebuilt = build_leaderboard(task, progress, pinned=pinned, entries=entries)
    exact = (recorded.get("versions") == library_versions()
             and recorded.get("numerics") == rebuilt.attrs["numerics"])
    diffs = compare_boards(committed, rebuilt, exact, None if exact else score_tolerance(task))
    if entries is None and exact and not diffs and render_board(rebuilt) != path.read_text(encoding="utf-8"):
        diffs.append(f"{path.name} is not in canonical form (order or formatting); rebuild it")
    return diffs
