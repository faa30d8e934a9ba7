"""One attempt: a plan and a script, what running it showed, and its grade.

Like every agent record it is a frozen dataclass with `to_dict`/`from_dict`, and
`from_dict(to_dict(x)) == x` exactly after a JSON round trip (fields.py says why).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from mleforge.agent.execution import ExecutionSummary
from mleforge.agent.fields import RecordError, read_field, read_number
from mleforge.reward.components import STAGES, classify_outcome


@dataclass(frozen=True)
class Node:
    """One attempt: a plan and a script, what running it showed, and its grade.

    `valid` means the run produced a valid, graded submission; `score` is its *public*
    score (the public part of the test answers, never the private part the final grade is
    on), or None in a run whose feedback is "none" (the agent sees execution output only).
    A node that is not valid is buggy and can be debugged.
    `error` says why a node is not valid (the crash, the timeout, the grader's
    reason for rejecting the submission). `execution` is None when nothing ran
    (the completion had no parsable action).
    """

    id: str
    stage: str  # the stage that produced it: draft, debug or improve
    plan: str
    code: str
    parent_id: str | None = None
    step: int = 0
    execution: ExecutionSummary | None = None
    score: float | None = None
    valid: bool = False
    error: str | None = None
    created_at: float = 0.0  # seconds since the epoch, from the caller's clock
    metadata: dict[str, Any] = field(default_factory=dict)  # policy name, tokens...; JSON values only

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id:
            raise RecordError(f"a node's id must be a non-empty string; got {self.id!r}")
        if self.stage not in STAGES:
            raise RecordError(f"node {self.id}: stage must be one of {', '.join(STAGES)}; got {self.stage!r}")
        if (self.stage == "draft") != (self.parent_id is None):
            raise RecordError(
                f"node {self.id}: a draft has no parent and a {self.stage} node needs one "
                f"(stage {self.stage!r}, parent {self.parent_id!r})"
            )
        if self.score is not None and not (self.valid and math.isfinite(self.score)):
            raise RecordError(
                f"node {self.id}: a score needs a valid node and a finite value; got {self.score!r} "
                f"(valid: {self.valid})"
            )
        # A copy, so the caller's dict can change without changing this frozen record.
        object.__setattr__(self, "metadata", dict(self.metadata))

    def __hash__(self) -> int:  # metadata is a dict: hash by id (equal nodes share an id)
        return hash(self.id)

    @property
    def is_buggy(self) -> bool:
        """No valid submission came out of this node."""
        return not self.valid

    @property
    def outcome(self) -> str:
        """The reward case of this node (mleforge.reward.classify_outcome)."""
        ex = self.execution
        if ex is None:
            return "valid" if self.valid else "format_error"
        return classify_outcome(
            format_ok=True,
            timed_out=ex.timed_out,
            returncode=ex.returncode,
            killed_by=ex.killed_by,
            valid_submission=self.valid,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "parent_id": self.parent_id,
            "stage": self.stage,
            "step": self.step,
            "plan": self.plan,
            "code": self.code,
            "execution": None if self.execution is None else self.execution.to_dict(),
            "score": self.score,
            "valid": self.valid,
            "is_buggy": self.is_buggy,  # derived; written for readers, ignored by from_dict
            "error": self.error,
            "created_at": self.created_at,
            "metadata": dict(self.metadata),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Node:
        what = f"node {data.get('id', '?') if isinstance(data, Mapping) else '?'}"
        execution = read_field(data, "execution", (dict,), what, optional=True)
        return cls(
            id=read_field(data, "id", (str,), what),
            parent_id=read_field(data, "parent_id", (str,), what, optional=True),
            stage=read_field(data, "stage", (str,), what),
            step=read_field(data, "step", (int,), what),
            plan=read_field(data, "plan", (str,), what),
            code=read_field(data, "code", (str,), what),
            execution=None if execution is None else ExecutionSummary.from_dict(execution),
            score=read_number(data, "score", what, optional=True),
            valid=read_field(data, "valid", (bool,), what),
            error=read_field(data, "error", (str,), what, optional=True),
            created_at=read_number(data, "created_at", what),  # type: ignore[arg-type]
            metadata=dict(read_field(data, "metadata", (dict,), what)),
        )
