"""Hand-made run reports and evaluation folders, for tests that need no episodes."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

from mleforge.eval.aggregate import aggregate
from mleforge.eval.config import EvalConfig
from mleforge.eval.records import RunFailure, RunReport
from mleforge.grading.report import GradeReport

THRESHOLDS = {"A": (0.95, 0.9, 0.85, 0.82), "B": (1.0, 1.5, 2.0, 2.5)}  # gold, silver, bronze, median


def report(task: str, seed: int, score: float | None, *, normalized: float | None = None,
           medal: str | None = None, above: bool = False, first_valid: int | None = None,
           lower: bool = False, steps: int = 3) -> RunReport:
    gold, silver, bronze, median = THRESHOLDS.get(task, (1.0, 0.9, 0.8, 0.5))
    grade = GradeReport(
        competition_id=task, score=score, gold_threshold=gold, silver_threshold=silver,
        bronze_threshold=bronze, median_threshold=median, any_medal=medal is not None,
        gold_medal=medal == "gold", silver_medal=medal == "silver", bronze_medal=medal == "bronze",
        above_median=above, submission_exists=score is not None, valid_submission=score is not None,
        is_lower_better=lower, created_at=datetime(2026, 1, 1), submission_path=f"/x/{task}/{seed}.csv",
        metric="rmse" if lower else "accuracy", normalized_score=normalized,
    )
    return RunReport(task_id=task, seed=seed, grade=grade, steps_to_first_valid=first_valid, steps=steps,
                     wall_s=10.0, completion_tokens=100, prompt_tokens=400, stopped_by="steps")


def grid_reports() -> tuple[list[RunReport], list[RunFailure]]:
    """Two tasks x three seeds; B seed 1 failed, A seed 2 finished with no valid submission."""
    reports = [
        report("A", 0, 0.96, normalized=1.0, medal="gold", above=True, first_valid=1),
        report("A", 1, 0.80, normalized=0.5, first_valid=3),
        report("A", 2, None),
        report("B", 0, 2.0, normalized=0.6, medal="bronze", above=True, first_valid=2, lower=True),
        report("B", 2, 1.5, normalized=0.8, medal="silver", above=True, first_valid=1, lower=True),
    ]
    return reports, [RunFailure("B", 1, "RuntimeError: boom")]


BWRAP = {"kind": "bwrap", "bwrap": "/usr/bin/bwrap", "bwrap_version": "0.8.0", "bwrap_source": "system",
         "as_root": False, "summary": "bwrap 0.8.0 (system: /usr/bin/bwrap)"}


def write_eval_dir(path: Path, policy: str, reports, failures=(), tasks=("A", "B"), seeds=(0, 1, 2),
                   contamination_warning: str | None = None, isolation: dict | None = None) -> Path:
    """A folder as `mleforge eval` leaves it (run.json, aggregate.json, leaderboards.json)."""
    path.mkdir(parents=True, exist_ok=True)
    config = EvalConfig(policy=policy, tasks=",".join(tasks), seeds=len(seeds), steps=3)
    contamination = {"checked": [], "overlap": [], "warning": contamination_warning}
    (path / "run.json").write_text(json.dumps({"kind": "eval", "policy": policy, "tasks": list(tasks),
                                               "seeds": list(seeds), "config": config.to_dict()}))
    summary = {"kind": "eval", "policy": policy, "interrupted": False, "config": config.to_dict(),
               "contamination": contamination, "isolation": isolation or BWRAP,
               **aggregate(reports, tasks, seeds, failures)}
    (path / "aggregate.json").write_text(json.dumps(summary, default=str))
    boards = {"A": {"metric": "accuracy", "is_lower_better": False,
                    "scores": [0.97, 0.95, 0.93, 0.9, 0.88, 0.85, 0.84, 0.82, 0.8, 0.7, 0.6, 0.5]},
              "B": {"metric": "rmse", "is_lower_better": True,
                    "scores": [0.9, 1.0, 1.2, 1.5, 1.7, 2.0, 2.2, 2.5, 2.6, 3.0, 4.0, 6.0]}}
    (path / "leaderboards.json").write_text(json.dumps(boards))
    return path
