"""Headroom: whether a state leaves a completion anything to gain on the reward's score term.

The rule (docs/guide/evaluation.md says it for users):

- A state's *reference* is the score the reward module compares a valid run with
  (mleforge.reward.components.reference_score): the state's best valid score for an improve
  state, the task's baseline (the sample submission's public score) for a draft or debug state.
- The *top* is the value a perfect submission scores on the task's metric (Metric.best: 1.0
  for accuracy, macro-F1, ROC-AUC, MAP@3, QWK; 0.0 for RMSE, MAE, RMSLE, log loss), in the
  metric's direction. A task that grades with a function of its own (grade_fn) or names a
  metric with no known best has no top.
- A state has headroom when its reference is worse than the top by more than TOLERANCE
  (relative, so a score stored as 0.9999999999 is at the top), and *unknown* headroom (None)
  when the task has no top or the reference is missing; unknown counts as headroom.

Why it matters for the reward: at a reference equal to the top no valid run can score better,
so delta <= 0 and the valid term sigmoid(alpha * delta) is at most the neutral reward (0.5 with
the default config); only the failure/valid split is left to move. Such a state measures
validity, not improvement, and a policy that is already valid there sits at the ceiling: it
dilutes any change of the policy. The step-wise evaluation reports these states apart
(mleforge.eval.stepwise) and drops them when it draws states (StateDraw).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mleforge.agent.state import State
    from mleforge.tasks.task import Task

TOLERANCE = 1e-9
RULE = ("a state has headroom when the score its reward compares with (an improve state's best, else the "
        "task's baseline) is worse than the metric's perfect value; unknown (no perfect value) counts as headroom")


def perfect_score(task: Task) -> float | None:
    """The value a perfect submission scores on `task`'s named metric; None for a task that
    grades with a function of its own, or a metric with no known best."""
    from mleforge.grading.metrics import get_metric

    spec = getattr(task, "spec", None)
    if spec is None or spec.grade_fn is not None or not spec.metric:
        return None
    try:
        return float(get_metric(spec.metric).best)
    except KeyError:
        return None


def has_headroom(reference: float | None, top: float | None, lower_is_better: bool) -> bool | None:
    """Whether `reference` is worse than `top` (see the module docstring); None when either is unknown."""
    if reference is None or top is None:
        return None
    margin = TOLERANCE * max(1.0, abs(top))
    return reference > top + margin if lower_is_better else reference < top - margin


def state_reference(state: State, baseline: float | None) -> float | None:
    """The score the reward compares a valid run of `state` with: its best for an improve
    state (the baseline where it has none), else the baseline."""
    if state.stage == "improve" and state.journal.best_score is not None:
        return float(state.journal.best_score)
    return baseline


def state_headroom(state: State, task: Task, baseline: float | None) -> bool | None:
    """has_headroom for `state` of `task`; `baseline` is the task's (RewardContext.baseline)."""
    return has_headroom(state_reference(state, baseline), perfect_score(task), state.journal.is_lower_better)
