"""Grade reports with MLE-bench's `CompetitionReport` field names, and their aggregation."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any

import numpy as np

# The fields of MLE-bench's CompetitionReport, in its order; its aggregation scripts read these.
MLEBENCH_FIELDS = (
    "competition_id", "score", "gold_threshold", "silver_threshold", "bronze_threshold",
    "median_threshold", "any_medal", "gold_medal", "silver_medal", "bronze_medal",
    "above_median", "submission_exists", "valid_submission", "is_lower_better",
    "created_at", "submission_path",
)


@dataclass(frozen=True)
class GradeReport:
    competition_id: str
    score: float | None
    gold_threshold: float
    silver_threshold: float
    bronze_threshold: float
    median_threshold: float
    any_medal: bool
    gold_medal: bool
    silver_medal: bool
    bronze_medal: bool
    above_median: bool
    submission_exists: bool
    valid_submission: bool
    is_lower_better: bool
    created_at: datetime
    submission_path: str
    # Ours, beyond MLE-bench's:
    metric: str = ""
    normalized_score: float | None = None  # 0 = the sample submission, 1 = the leaderboard's best
    invalid_reason: str | None = None
    # The protocol (Kaggle's public/private split): which rows `score` is on ("private": the
    # final grade of a built-in task; "full": an `mlebench:` final grade, MLE-bench's own;
    # "public": feedback during a run), the public part's score beside it, and what the run
    # that made the submission was shown ("public" scores, or "none": execution output only).
    part: str = "private"
    public_score: float | None = None
    feedback: str | None = None
    # Set when the grader itself failed on this submission (the exception's type and
    # message): the submission is invalid, but a grader's bug must not pass for its fault.
    grader_error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, datetime):
                value = value.isoformat()
            elif isinstance(value, (bool, np.bool_)):
                value = bool(value)
            elif isinstance(value, (float, np.floating)):
                value = float(value) + 0.0  # no -0.0 in a report
            out[f.name] = value
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GradeReport:
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        values["created_at"] = datetime.fromisoformat(values["created_at"])
        return cls(**values)


def aggregate_reports(reports: Iterable[GradeReport]) -> dict[str, Any]:
    """Totals over many reports, with MLE-bench's keys, plus rates and the mean normalized score."""
    reports = list(reports)
    n = len(reports)

    def total(attr: str) -> int:
        return int(sum(bool(getattr(r, attr)) for r in reports))

    normalized = [r.normalized_score for r in reports if r.normalized_score is not None]
    medals = total("gold_medal") + total("silver_medal") + total("bronze_medal")
    return {
        "total_runs": n,
        "total_runs_with_submissions": total("submission_exists"),
        "total_valid_submissions": total("valid_submission"),
        "total_medals": medals,
        "total_gold_medals": total("gold_medal"),
        "total_silver_medals": total("silver_medal"),
        "total_bronze_medals": total("bronze_medal"),
        "total_above_median": total("above_median"),
        # Invalid because the grader failed, not the submission: a bug to look into.
        "total_grader_errors": sum(r.grader_error is not None for r in reports),
        "valid_submission_rate": total("valid_submission") / n if n else 0.0,
        "above_median_rate": total("above_median") / n if n else 0.0,
        "any_medal_rate": medals / n if n else 0.0,
        # Invalid runs count as 0 (the sample submission's level), as they earn nothing.
        "mean_normalized_score": (
            float(np.mean([r.normalized_score if r.normalized_score is not None else 0.0 for r in reports]))
            if n else None
        ),
        "mean_normalized_score_valid": float(np.mean(normalized)) if normalized else None,
        "competition_reports": [r.to_dict() for r in reports],
    }
