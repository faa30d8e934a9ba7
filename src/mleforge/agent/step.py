"""One step of the agent: a completion for a state becomes a node, a grade and a reward.

This is the unit everything else repeats: the episode runner (AIDE-style
search), the Gymnasium-style environment, and step-wise GRPO, whose reward
function executes one completion per state. Parsing, execution (in the
sandbox) and grading (here, in the parent) happen in that order; each failure
becomes the node's `error` and its reward case, never an exception.
"""

from __future__ import annotations

import hashlib
import math
import shutil
import time
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from mleforge.agent.actions import Action, ActionFormatError, parse_completion
from mleforge.agent.execution import ExecutionSummary
from mleforge.agent.node import Node
from mleforge.agent.state import State
from mleforge.grading.grader import grade, sample_submission_score
from mleforge.grading.report import GradeReport
from mleforge.reward import RewardBreakdown, RewardConfig, compute_reward
from mleforge.reward.components import reference_score, task_scale
from mleforge.sandbox import ExecutionResult, RunLimits
from mleforge.tasks.answer_split import check_feedback
from mleforge.tasks.task import Task

# What a node keeps of each output stream: enough for a debug prompt, small enough for a journal.
NODE_OUTPUT_CHARS = 8000


@dataclass(frozen=True)
class RewardContext:
    """What the reward needs to know about a task: its baseline, scale and leaderboard, and
    what the agent is shown of its own submissions.

    Every step is graded on the *public* part of the test answers (Kaggle's public
    leaderboard; `tasks.answer_split`), never the private part the final grade is on: the reward
    (and so training's reward) and, with `feedback="public"`, the node's score that prompts
    show and the search selects by. With `feedback="none"` the node keeps no score (the agent
    gets execution output only, as in MLE-bench's protocol); the reward still comes from
    the public score.
    """

    task: Task
    config: RewardConfig = field(default_factory=RewardConfig)
    feedback: str = "public"

    def __post_init__(self) -> None:
        check_feedback(self.feedback)

    @cached_property
    def leaderboard_scores(self) -> tuple[float, ...]:
        return tuple(float(s) for s in self.task.leaderboard()["score"])

    @cached_property
    def baseline(self) -> float:
        """The sample submission's public score; the leaderboard's worst entry if it is not valid."""
        score = sample_submission_score(self.task, "public")
        if score is not None:
            return score
        worst = max if self.task.is_lower_better else min
        return float(worst(self.leaderboard_scores))

    @cached_property
    def scale(self) -> float:
        return task_scale(self.leaderboard_scores, self.task.is_lower_better,
                          self.config.scale_source, self.config.scale_floor)

    def reward(self, state: State, node: Node, report: GradeReport | None) -> RewardBreakdown:
        """The reward of a node, from its public grade `report` (a valid node's score is the
        report's; the node itself may hold none, with feedback "none")."""
        if node.outcome != "valid":
            return compute_reward(node.outcome, config=self.config)
        score = report.score if report is not None and report.score is not None else node.score
        reference = reference_score(state.stage, baseline=self.baseline, best_score=state.journal.best_score)
        medal = None
        if report is not None:
            medal = next((m for m in ("gold", "silver", "bronze") if getattr(report, f"{m}_medal")), None)
        return compute_reward(
            "valid", score=score, reference=self.baseline if reference is None else reference,
            scale=self.scale, is_lower_better=self.task.is_lower_better, config=self.config,
            leaderboard_scores=self.leaderboard_scores, medal=medal,
        )


@dataclass(frozen=True)
class StepOutcome:
    """Everything one step produced. `result` is None when nothing ran (a format error)."""

    state: State
    node: Node
    reward: RewardBreakdown
    report: GradeReport | None
    result: ExecutionResult | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "state_id": self.state.state_id,
            "stage": self.state.stage,
            "node": self.node.to_dict(),
            "outcome": self.node.outcome,
            "reward": self.reward.to_dict(),
            "report": None if self.report is None else self.report.to_dict(),
            "result": None if self.result is None else self.result.to_dict(),
        }


def node_id_for(state: State, completion: str, salt: str = "") -> str:
    """A node id that is the same for the same state, completion and salt (a rerun of a
    seeded run makes the same ids; two samples in a GRPO group differ by salt)."""
    digest = hashlib.sha256(f"{state.state_id}\0{salt}\0{completion}".encode("utf-8", "replace")).hexdigest()
    return f"n{state.step:03d}-{digest[:10]}"


def run_step(
    state: State,
    completion: str | bytes | None,
    task: Task,
    executor: Any,
    rewards: RewardContext,
    *,
    limits: RunLimits | None = None,
    node_id: str | None = None,
    metadata: dict[str, Any] | None = None,
    keep_submission: Path | None = None,
) -> StepOutcome:
    """Parse, execute, grade and reward one completion for `state`.

    `keep_submission`, when given, receives a copy of a written submission file
    (the executor's own copy is discarded once graded).
    """
    text = completion.decode("utf-8", "replace") if isinstance(completion, bytes) else (completion or "")
    target = state.target
    base_code = target.code if target is not None else None
    common = {
        "id": node_id or node_id_for(state, text),
        "stage": state.stage,
        "parent_id": state.target_node_id,
        "step": state.step,
        "created_at": time.time(),
        "metadata": dict(metadata or {}),
    }
    try:
        action = parse_completion(completion, state.stage, base_code)
    except ActionFormatError as exc:
        node = Node(plan="", code=base_code or "", error=f"format error ({exc.kind}): {exc.reason}", **common)
        return StepOutcome(state, node, rewards.reward(state, node, None), None, None)

    result = executor.run(action.code, task, limits)
    report = _grade_public(task, result, executor, rewards.feedback, keep_submission)
    node = _ran_node(action, result, report, rewards.feedback, common)
    return StepOutcome(state, node, rewards.reward(state, node, report), report, result)


def _grade_public(task: Task, result: ExecutionResult, executor: Any, feedback: str,
                  keep_submission: Path | None) -> GradeReport | None:
    """The public grade of a run's submission (None when it wrote none); the executor's copy
    of the run is discarded whatever happens."""
    report: GradeReport | None = None
    try:
        if result.submission_path:
            # The public part only: nothing of a run sees the private score before its final grade.
            report = grade(task, result.submission_path, part="public", feedback=feedback)
            if keep_submission is not None:
                keep_submission.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(result.submission_path, keep_submission)
    finally:
        executor.discard(result)
    return report


def _ran_node(action: Action, result: ExecutionResult, report: GradeReport | None, feedback: str,
              common: dict[str, Any]) -> Node:
    """The node of an action that ran: valid when it ran clean and its submission graded valid."""
    execution = ExecutionSummary.from_result(result, max_chars=NODE_OUTPUT_CHARS)
    ran_clean = execution.succeeded
    valid = bool(report is not None and report.valid_submission and ran_clean)
    return Node(
        plan=action.plan,
        code=action.code,
        execution=execution,
        # The public score, shown to the agent only with feedback "public" (and only a finite
        # one: an `mlebench:` grader's valid nan is a valid node with nothing to show).
        score=(report.score if valid and report is not None and feedback == "public"
               and report.score is not None and math.isfinite(report.score) else None),
        valid=valid,
        error=None if valid else _error_text(result, report),
        **{**common, "metadata": {**common["metadata"], "format": action.format, "n_edits": action.n_edits}},
    )


def _error_text(result: ExecutionResult, report: GradeReport | None) -> str:
    """Why a run did not yield a valid submission, in one line for memories and prompts."""
    if result.timed_out:
        return f"the script hit the time limit ({result.limits.get('timeout_s', '?')} s) and was killed"
    if result.killed_by:
        return f"the script was killed (limit: {result.killed_by})"
    if result.returncode not in (0, None):
        return f"the script exited with code {result.returncode}"
    if result.returncode is None:
        return f"the script was ended by signal {result.signal}"
    if report is None:
        return "the script ran but wrote no ./submission/submission.csv"
    return f"invalid submission: {report.invalid_reason}"
