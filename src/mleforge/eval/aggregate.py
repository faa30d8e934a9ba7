"""Aggregating an evaluation grid like MLE-bench: per seed first, then mean and SEM over seeds.

Definitions (pure functions; tests/eval/test_aggregate.py checks them on hand-made reports):

- The grid is tasks x seeds. A run that never finished (it failed with an exception, or the
  evaluation was interrupted before it) is *missing*: it is left out of every number and
  listed under `runs.missing`, with its error when it failed. It is not counted as a zero,
  because it says nothing about the policy (a crash of the harness, a killed process).
- A finished run whose final answer is not a valid submission counts as 0 for every rate
  (valid, above median, medals) and as 0 for the normalized score (the sample
  submission's level: it earned nothing).
- For each seed s with n_s finished runs: rate_s = (runs with the property) / n_s;
  normalized_s = mean over its runs; steps_to_first_valid_s = mean over its runs that
  reached a valid submission (a seed with none has no value).
- Over the k seeds that have a value: mean = sum / k and SEM = sample standard deviation
  (ddof=1) / sqrt(k). With k = 1 the SEM is None: one seed gives no estimate of spread,
  and 0 would read as certainty. With k = 0 the mean is None too.
- Per task (ML-Agent's table): `best` and `avg` are the best and the mean of the valid
  final scores over that task's finished runs (the metric's own units and direction);
  `valid` says how many of the runs they come from.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from mleforge.eval.records import RunFailure, RunReport
from mleforge.grading.report import aggregate_reports

# Means of 5-decimal scores, rounded so a report shows 0.580135, not 0.5801350000000001.
MEAN_DECIMALS = 6

RATES = ("valid_submission", "above_median", "any_medal", "gold_medal", "silver_medal", "bronze_medal")


def mean_sem(values: Sequence[float]) -> dict[str, Any]:
    """{"mean", "sem", "n"}: SEM = sample std (ddof=1) / sqrt(n); None for n = 1 (and mean None for n = 0)."""
    n = len(values)
    if n == 0:
        return {"mean": None, "sem": None, "n": 0}
    mean = math.fsum(values) / n
    if n == 1:
        return {"mean": round(mean, MEAN_DECIMALS), "sem": None, "n": 1}
    variance = math.fsum((v - mean) ** 2 for v in values) / (n - 1)
    return {"mean": round(mean, MEAN_DECIMALS), "sem": math.sqrt(variance) / math.sqrt(n), "n": n}


def normalized_value(report: RunReport) -> float | None:
    """A run's normalized score for averaging: 0 when its answer is invalid; None (left out)
    when a valid score has no normalized value (a leaderboard whose best equals its anchor)."""
    if not report.grade.valid_submission:
        return 0.0
    return report.grade.normalized_score


def _by_seed(reports: Iterable[RunReport]) -> dict[int, list[RunReport]]:
    out: dict[int, list[RunReport]] = {}
    for report in reports:
        out.setdefault(report.seed, []).append(report)
    return dict(sorted(out.items()))


def over_seeds(reports: Sequence[RunReport], value: Callable[[list[RunReport]], float | None]) -> dict[str, Any]:
    """`value` of each seed's runs, then mean and SEM over the seeds that have one."""
    per_seed = {seed: value(runs) for seed, runs in _by_seed(reports).items()}
    kept = {seed: v for seed, v in per_seed.items() if v is not None}
    return {**mean_sem(list(kept.values())), "per_seed": {str(seed): v for seed, v in kept.items()}}


def _rate(flag: str) -> Callable[[list[RunReport]], float | None]:
    return lambda runs: sum(bool(getattr(r.grade, flag)) for r in runs) / len(runs) if runs else None


def _mean_of(values: list[float | None]) -> float | None:
    kept = [v for v in values if v is not None]
    return math.fsum(kept) / len(kept) if kept else None


def _mean_normalized(runs: list[RunReport]) -> float | None:
    return _mean_of([normalized_value(r) for r in runs])


def _mean_first_valid(runs: list[RunReport]) -> float | None:
    return _mean_of([r.steps_to_first_valid for r in runs])


def task_summary(task_id: str, reports: Sequence[RunReport], missing: int) -> dict[str, Any]:
    """ML-Agent's Best/Avg for one task, with its medals and its leaderboard thresholds."""
    valid = [r.grade.score for r in reports if r.grade.valid_submission]
    first = reports[0].grade if reports else None
    lower = bool(first and first.is_lower_better)
    best = (min(valid) if lower else max(valid)) if valid else None
    return {
        "task_id": task_id,
        "metric": first.metric if first else "",
        "is_lower_better": lower,
        "runs": len(reports),
        "missing": missing,
        "valid": len(valid),
        "best": best,
        "avg": round(math.fsum(valid) / len(valid), MEAN_DECIMALS) if valid else None,
        "scores": {str(r.seed): r.grade.score for r in sorted(reports, key=lambda r: r.seed)},
        "mean_normalized_score": _mean_normalized(list(reports)),
        "above_median": sum(r.grade.above_median for r in reports),
        "gold": sum(r.grade.gold_medal for r in reports),
        "silver": sum(r.grade.silver_medal for r in reports),
        "bronze": sum(r.grade.bronze_medal for r in reports),
        "mean_steps_to_first_valid": _mean_first_valid(list(reports)),
        "thresholds": None if first is None else {
            "gold": first.gold_threshold, "silver": first.silver_threshold,
            "bronze": first.bronze_threshold, "median": first.median_threshold},
    }


def aggregate(reports: Sequence[RunReport], tasks: Sequence[str], seeds: Sequence[int],
              failures: Sequence[RunFailure] = ()) -> dict[str, Any]:
    """The aggregate of a grid (see the module doc). Reports outside tasks x seeds are ignored."""
    grid = {(t, s) for t in tasks for s in seeds}
    reports = sorted((r for r in reports if (r.task_id, r.seed) in grid), key=lambda r: (r.task_id, r.seed))
    done = {(r.task_id, r.seed) for r in reports}
    errors = {(f.task_id, f.seed): f.error for f in failures}
    missing = [{"task_id": t, "seed": s, "reason": "failed" if (t, s) in errors else "not run",
                "error": errors.get((t, s))}
               for t in tasks for s in seeds if (t, s) not in done]
    metrics = {flag: over_seeds(reports, _rate(flag)) for flag in RATES}
    metrics["normalized_score"] = over_seeds(reports, _mean_normalized)
    metrics["steps_to_first_valid"] = over_seeds(reports, _mean_first_valid)
    totals = aggregate_reports(r.grade for r in reports)
    totals.pop("competition_reports")
    return {
        "tasks": list(tasks),
        "seeds": list(seeds),
        "runs": {"expected": len(grid), "finished": len(reports),
                 "failed": sum(m["reason"] == "failed" for m in missing), "missing": missing},
        "metrics": metrics,
        "per_task": [task_summary(t, [r for r in reports if r.task_id == t],
                                  sum(m["task_id"] == t for m in missing)) for t in tasks],
        "usage": {
            "wall_s": math.fsum(r.wall_s for r in reports),
            "steps": sum(r.steps for r in reports),
            "completion_tokens": sum(r.completion_tokens for r in reports),
            "prompt_tokens": sum(r.prompt_tokens for r in reports),
            "stopped_by_time_limit": sum(r.stopped_by == "time_limit" for r in reports),
        },
        # MLE-bench's totals over all finished runs, under its own keys.
        "mlebench": totals,
        "reports": [r.to_dict() for r in reports],
    }
