"""Folders laid out as MLE-bench's: a stand-in `mlebench` package (the modules its graders
import: grade_helpers, competitions/utils.py) and competition folders beside it.

The stand-in reproduces the import layout only; the graders written here are small and
ours, with values a test can compute by hand.
"""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pandas as pd

CONFIG = """\
id: {id}
name: {id}
competition_type: simple
awards_medals: false
prizes: null
description: mlebench/competitions/{id}/description.md

dataset:
  answers: {id}/prepared/private/{answers}
  sample_submission: {id}/prepared/public/sample_submission.csv

grader:
  name: {grader}
  grade_fn: mlebench.competitions.{id}.grade:grade

preparer: mlebench.competitions.{id}.prepare:prepare
"""

GRADE_HELPERS = '''\
class InvalidSubmissionError(Exception):
    """A custom exception for when the agent submission cannot be graded."""
'''

# The two helpers of mlebench/competitions/utils.py that the graders below import.
COMPETITION_UTILS = '''\
import pandas as pd

from mlebench.grade_helpers import InvalidSubmissionError


def one_hot_dfs_to_log_loss_inputs(submission, answers, id_column="id", apply_softmax=True):
    missing = set(answers.columns) - set(submission.columns)
    if missing:
        raise InvalidSubmissionError(f"missing columns {sorted(missing)}")
    submission = submission[list(answers.columns)].sort_values(id_column).reset_index(drop=True)
    answers = answers.sort_values(id_column).reset_index(drop=True)
    return {"y_true": answers.drop(columns=[id_column]).to_numpy(),
            "y_pred": submission.drop(columns=[id_column]).to_numpy()}


def prepare_for_auroc_metric(submission, answers, id_col, target_col):
    if target_col not in submission.columns:
        raise InvalidSubmissionError(f"Submission should have a {target_col} column")
    submission = submission.sort_values(id_col)
    answers = answers.sort_values(id_col)
    return {"y_true": answers[target_col].to_numpy(), "y_score": submission[target_col].to_numpy()}
'''


def write_package(root: Path) -> Path:
    """`<root>/mlebench/` with __init__, grade_helpers and competitions/{__init__,utils}.py;
    returns the competitions folder."""
    package = root / "mlebench"
    competitions = package / "competitions"
    competitions.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "grade_helpers.py").write_text(GRADE_HELPERS)
    (competitions / "__init__.py").write_text("")
    (competitions / "utils.py").write_text(COMPETITION_UTILS)
    return competitions


def write_competition(
    competitions: Path,
    data: Path,
    comp_id: str,
    grade_py: str,
    answers: pd.DataFrame | list[dict],
    sample: pd.DataFrame,
    scores: list[float],
    files: dict[str, str] | None = None,
    grader: str = "test-grader",
) -> Path:
    """A competition folder (config, grade.py and helper files, leaderboard in the given
    order, description) and its prepared data; answers as .jsonl when given a list."""
    folder = competitions / comp_id
    folder.mkdir(parents=True)
    answers_name = "answers.jsonl" if isinstance(answers, list) else "test.csv"
    (folder / "config.yaml").write_text(CONFIG.format(id=comp_id, answers=answers_name, grader=grader))
    (folder / "grade.py").write_text(textwrap.dedent(grade_py))
    for name, text in (files or {}).items():
        (folder / name).write_text(textwrap.dedent(text))
    (folder / "description.md").write_text(f"# {comp_id}\n")
    pd.DataFrame({"teamName": [f"t{i}" for i in range(len(scores))], "score": scores}).to_csv(
        folder / "leaderboard.csv", index=False)
    public, private = data / comp_id / "prepared" / "public", data / comp_id / "prepared" / "private"
    public.mkdir(parents=True)
    private.mkdir(parents=True)
    sample.to_csv(public / "sample_submission.csv", index=False)
    sample.drop(columns=sample.columns[1:]).to_csv(public / "test.csv", index=False)
    if isinstance(answers, list):
        (private / answers_name).write_text("".join(json.dumps(row) + "\n" for row in answers))
    else:
        answers.to_csv(private / answers_name, index=False)
    return folder


def forget_modules() -> None:
    """Drop every module loaded from these folders, so the next test starts clean."""
    for name in [m for m in sys.modules if m.split(".")[0] in ("mlebench", "_mleforge_mlebench_competitions")]:
        del sys.modules[name]
