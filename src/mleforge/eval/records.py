"""The per-run records of an evaluation: a finished run's report, and a run that failed.

A finished run's `report.json` is MLE-bench's `CompetitionReport` of its final answer (the
best valid node's submission, graded), flat, so MLE-bench's aggregation scripts read it,
followed by our fields: seed, steps to the first valid submission, steps and time used,
tokens used, and why the episode stopped. A run with no valid node still gets one: no
submission, no score, the leaderboard's thresholds, nothing earned (the grader's own
`no_submission_report`, made by the runner).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from mleforge.errors import MleforgeError
from mleforge.grading.report import GradeReport

OUR_FIELDS = ("task_id", "seed", "steps_to_first_valid", "steps", "wall_s", "completion_tokens",
              "prompt_tokens", "stopped_by", "run_dir")


class EvalRecordError(MleforgeError):
    """A report, failure or aggregate file of an evaluation is missing or malformed."""


@dataclass(frozen=True)
class RunReport:
    """One finished (task, seed) episode, graded."""

    task_id: str
    seed: int
    grade: GradeReport
    steps_to_first_valid: int | None  # 1-based; None when no step produced a valid submission
    steps: int
    wall_s: float
    completion_tokens: int
    prompt_tokens: int
    stopped_by: str  # "steps" | "time_limit"
    run_dir: str = ""

    def to_dict(self) -> dict[str, Any]:
        ours = {name: getattr(self, name) for name in OUR_FIELDS}
        return {**self.grade.to_dict(), **ours}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunReport:
        try:
            return cls(grade=GradeReport.from_dict(dict(data)), **{name: data[name] for name in OUR_FIELDS})
        except (KeyError, TypeError, ValueError) as exc:
            raise EvalRecordError(f"malformed run report ({type(exc).__name__}: {exc})") from None

    @classmethod
    def from_episode(cls, result: Mapping[str, Any], seed: int, no_valid: GradeReport) -> RunReport:
        """From an episode's result.json; `no_valid` is the report to use when it had no valid node."""
        grade = GradeReport.from_dict(result["report"]) if result.get("report") else no_valid
        return cls(
            task_id=result["task_id"], seed=seed, grade=grade,
            steps_to_first_valid=result["steps_to_first_valid"], steps=result["steps"],
            wall_s=result["wall_s"], completion_tokens=result["completion_tokens"],
            prompt_tokens=result["prompt_tokens"], stopped_by=result["stopped_by"],
            run_dir=result["run_dir"],
        )


@dataclass(frozen=True)
class RunFailure:
    """A (task, seed) episode that raised: it never finished, so the aggregate leaves it out."""

    task_id: str
    seed: int
    error: str  # "<ExceptionType>: message"
    run_dir: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunFailure:
        return cls(**{f.name: data[f.name] for f in fields(cls) if f.name in data})
