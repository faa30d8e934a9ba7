"""A tiny user task folder, written by tests."""

from __future__ import annotations

import textwrap
from pathlib import Path

TASK_YAML = """\
id: {id}
name: Tiny task
description: description.md
modality: tabular
problem: binary
{metric_lines}
preparer: prepare:prepare
target: y
submission:
  id_column: id
  target_columns: [y]
limits: {{timeout_s: 30, memory_mb: 1024, cpus: 1}}
tags: [tiny]
"""

PREPARE = '''\
import pandas as pd


def prepare(raw, public, private):
    pd.DataFrame({"id": [1, 2, 3, 4], "x": [0.1, 0.9, 0.2, 0.8], "y": [0, 1, 0, 1]}).to_csv(
        public / "train.csv", index=False)
    pd.DataFrame({"id": [5, 6, 7, 8], "x": [0.3, 0.7, 0.1, 0.95]}).to_csv(public / "test.csv", index=False)
    pd.DataFrame({"id": [5, 6, 7, 8], "y": [0, 0, 0, 0]}).to_csv(public / "sample_submission.csv", index=False)
    pd.DataFrame({"id": [5, 6, 7, 8], "y": [0, 1, 0, 1]}).to_csv(private / "answers.csv", index=False)
'''

LEADERBOARD = "score\n1.0\n0.75\n0.75\n0.5\n0.5\n"


def write_task(root: Path, task_id: str = "tiny", metric_lines: str = "metric: accuracy",
               grade_py: str | None = None) -> Path:
    folder = root / task_id
    folder.mkdir(parents=True)
    (folder / "task.yaml").write_text(TASK_YAML.format(id=task_id, metric_lines=metric_lines))
    (folder / "prepare.py").write_text(PREPARE)
    (folder / "description.md").write_text("# Tiny\nPredict y from x.\n")
    (folder / "leaderboard.csv").write_text(LEADERBOARD)
    if grade_py is not None:
        (folder / "grade.py").write_text(textwrap.dedent(grade_py))
    return folder
