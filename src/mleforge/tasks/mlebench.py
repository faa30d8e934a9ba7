"""MLE-bench competitions as mleforge tasks (`mlebench:<competition-id>`).

MLE-bench keeps each competition in `<competitions dir>/<id>/` (config.yaml,
grade.py and its helper modules, leaderboard.csv, description.md) and its data
in `<data dir>/<id>/prepared/{public,private}/`. With the `mlebench` package
installed both directories come from its registry; `MLEBENCH_COMPETITIONS_DIR`
and `MLEBENCH_DATA_DIR` override them.

A competition's `grade.py` is loaded as MLE-bench imports it
(`mleforge.tasks.mlebench_grade`).

Grading then goes field for field as `mlebench.grade.grade_csv`
(`mleforge.grading.grader`); the direction is MLE-bench's `is_lower_better`:
lower is better when the leaderboard's first score is below its last, so a
leaderboard whose scores all tie counts as higher-is-better.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import yaml

from mleforge.errors import TaskNotFound, TaskSpecError
from mleforge.tasks.mlebench_grade import COMPETITIONS_ENV
from mleforge.tasks.spec import Limits, SubmissionFormat, TaskSpec
from mleforge.tasks.task import Task

PREFIX = "mlebench:"
DATA_ENV = "MLEBENCH_DATA_DIR"


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
