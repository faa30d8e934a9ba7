"""MLE-bench competitions as mleforge tasks (`mlebench:<competition-id>`).

MLE-bench keeps each competition in `<competitions dir>/<id>/` (config.yaml,
grade.py, leaderboard.csv, description.md, prepare.py) and its data in
`<data dir>/<id>/prepared/{public,private}/`. With the `mlebench` package
installed both directories come from its registry; `MLEBENCH_COMPETITIONS_DIR`
and `MLEBENCH_DATA_DIR` override them (and make the adapter usable on a copy of
MLE-bench's layout without the package). Grading uses the competition's own
grade function and leaderboard, as MLE-bench does.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import yaml

from mleforge.errors import TaskNotFound, TaskSpecError
from mleforge.tasks.spec import Limits, SubmissionFormat, TaskSpec
from mleforge.tasks.task import Task

PREFIX = "mlebench:"
COMPETITIONS_ENV = "MLEBENCH_COMPETITIONS_DIR"
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
            grader = config["grader"]
            grade_fn = grader["grade_fn"]
        except (KeyError, TypeError) as exc:
            raise TaskSpecError(config_path, str(exc).strip("'"), "missing; MLE-bench's config.yaml needs it") from None
        leaderboard_path = folder / "leaderboard.csv"
        # MLE-bench reads the direction off the leaderboard: lower is better when the
        # top score is below the bottom one.
        is_lower_better = False
        if leaderboard_path.is_file():
            scores = pd.read_csv(leaderboard_path)["score"]
            is_lower_better = bool(scores.iloc[0] < scores.iloc[-1])
        # The grade function is MLE-bench's `mlebench.competitions.<id>.grade:grade`;
        # load the competition folder's grade.py, the very file that string names.
        module, _, attr = grade_fn.partition(":")
        local_grade = f"{module.rsplit('.', 1)[-1]}:{attr}"
        header = pd.read_csv(sample, nrows=0).columns.tolist() if sample.is_file() else ["id", "target"]
        description_path = folder / "description.md"
        if not description_path.is_file():
            description_path = config_path
        spec = TaskSpec(
            id=PREFIX + competition_id,
            name=str(config.get("name", competition_id)),
            folder=folder,
            description_path=description_path,
            modality=str(config.get("competition_type", "other")),
            problem="other",
            metric=None,
            grade_fn=local_grade,
            direction="lower" if is_lower_better else "higher",
            preparer=str(config.get("preparer", "prepare:prepare")),
            target=None,
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
