"""The report sections of evaluation runs (kind "eval"): summary, rates, per-task scores, runs.

Every section takes all evaluation runs of a report at once, so two policies (or a model
before and after training) appear side by side in each table and plot.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mleforge.eval import plots
from mleforge.eval.report import Callout, Figure, LoadedRun, Section, Table, Text, register_section

DEFINITIONS = (
    "Rates are computed per seed over the finished runs of that seed, then averaged over seeds "
    "(± the standard error of the mean, sample std / sqrt(seeds); none with one seed). A finished "
    "run whose final answer is invalid counts as 0; a run that never finished (it failed, or the "
    "evaluation was interrupted) is left out and listed below. The normalized score is 0 at the "
    "sample submission and 1 at the leaderboard's best. Best and Avg per task are the best and the "
    "mean of the valid final scores (ML-Agent's table), in the metric's own units. Final scores are "
    "graded on the private part of the test answers (MLE-bench's full grade for mlebench: ids), which "
    "no run sees before its end; the feedback column says what the runs were shown: public (each "
    "submission's score on the public part) or none (execution output only)."
)


def pm(metric: dict[str, Any] | None, scale: float = 100.0, digits: int = 1) -> str:
    """'mean ± sem' of an aggregate metric; '–' when no seed has a value."""
    if not metric or metric.get("mean") is None:
        return "–"
    sem = "" if metric.get("sem") is None else f" ± {metric['sem'] * scale:.{digits}f}"
    return f"{metric['mean'] * scale:.{digits}f}{sem}"


def _agg(run: LoadedRun) -> dict[str, Any]:
    return run.files.get("aggregate") or {}


def _per_task(run: LoadedRun) -> dict[str, dict[str, Any]]:
    return {t["task_id"]: t for t in _agg(run).get("per_task", [])}


def _tasks(runs: Sequence[LoadedRun]) -> list[str]:
    return list(dict.fromkeys(t for r in runs for t in _agg(r).get("tasks", r.record.get("tasks", []))))


def _callouts(runs: Sequence[LoadedRun]) -> list[Callout]:
    out = []
    for run in runs:
        agg = _agg(run)
        if not agg:
            out.append(Callout(f"{run.label}: no aggregate.json yet in {run.path} (the evaluation never "
                               "reached its end); run `mleforge eval` again to resume it"))
            continue
        warning = (agg.get("contamination") or {}).get("warning")
        if warning:
            out.append(Callout(f"{run.label}: {warning}"))
        if _isolation(agg) == "none":
            out.append(Callout(f"{run.label}: its scripts ran UNISOLATED (--isolation none): they could read "
                               "the private answers, so its scores prove nothing"))
        missing = agg["runs"]["missing"]
        if missing:
            failed = sum(m["reason"] == "failed" for m in missing)
            out.append(Callout(f"{run.label}: {len(missing)} of {agg['runs']['expected']} runs did not finish "
                               f"({failed} failed, {len(missing) - failed} not run"
                               f"{', evaluation interrupted' if agg.get('interrupted') else ''}); "
                               "they are left out of every number"))
    return out


def _isolation(agg: dict[str, Any]) -> str:
    """How the runs were isolated: "bwrap 0.11.0 (bundled: ...)", "none", or "unknown"
    for aggregates written before it was recorded."""
    return (agg.get("isolation") or {}).get("summary", "unknown")


def summary_section(runs: Sequence[LoadedRun]) -> list[Section]:
    rows = []
    for run in runs:
        agg = _agg(run)
        if not agg:
            continue
        m, config, usage, finished = agg["metrics"], agg["config"], agg["usage"], agg["runs"]["finished"]
        rows.append((
            run.label, (agg.get("protocol") or {}).get("feedback", config.get("feedback", "public")),
            len(agg["tasks"]), f"{len(agg['seeds'])} x {config['steps']}",
            f"{finished}/{agg['runs']['expected']}", pm(m["valid_submission"]), pm(m["above_median"]),
            pm(m["any_medal"]), pm(m["gold_medal"]), pm(m["silver_medal"]), pm(m["bronze_medal"]),
            pm(m["normalized_score"], 1.0, 3), pm(m["steps_to_first_valid"], 1.0, 2),
            round(usage["completion_tokens"] / finished) if finished else None,
            round(usage["wall_s"] / finished, 1) if finished else None, _isolation(agg),
        ))
    columns = ("run", "feedback", "tasks", "seeds x steps", "finished", "valid %", "above median %", "any medal %",
               "gold %", "silver %", "bronze %", "normalized", "steps to 1st valid", "tokens / run", "s / run",
               "isolation")
    blocks: list[Any] = [*_callouts(runs), Table(columns, tuple(rows), "mean ± SEM over seeds"),
                         Text(DEFINITIONS)]
    return [Section("Summary", tuple(blocks))]


def rates_section(runs: Sequence[LoadedRun]) -> list[Section]:
    done = [r for r in runs if _agg(r)]
    if not done:
        return []
    png = plots.rate_bars([r.label for r in done], [_agg(r)["metrics"] for r in done])
    return [Section("Valid submissions and medals", (Figure(
        "rates", png, "Share of runs with a valid submission, above the leaderboard median, and with "
        "each medal (mean ± SEM over seeds)."),))]


def _best_avg(summary: dict[str, Any] | None) -> str:
    if not summary or not summary["runs"]:
        return "–"
    if summary["best"] is None:
        return f"no valid ({summary['valid']}/{summary['runs']})"
    medals = "".join(f" {k[0].upper()}{summary[k]}" for k in ("gold", "silver", "bronze") if summary[k])
    return f"{summary['best']:.4g} / {summary['avg']:.4g} ({summary['valid']}/{summary['runs']}){medals}"


def tasks_section(runs: Sequence[LoadedRun]) -> list[Section]:
    done = [r for r in runs if _agg(r)]
    tasks = _tasks(done)
    if not tasks:
        return []
    per_task = [_per_task(r) for r in done]
    boards: dict[str, Any] = {}
    for run in done:
        boards.update(run.files.get("leaderboards") or {})
    labels = [r.label for r in done]
    rows = []
    for task_id in tasks:
        first = next((p[task_id] for p in per_task if task_id in p), {})
        metric = f"{first.get('metric', '')} ({'↓' if first.get('is_lower_better') else '↑'})"
        rows.append((task_id, metric, *(_best_avg(p.get(task_id)) for p in per_task)))
    table = Table(("task", "metric", *labels), tuple(rows),
                  "Best / Avg of the final scores (valid runs / finished runs); G, S, B: medals won")
    blocks = [
        table,
        Figure("task_scores", plots.task_panels(tasks, boards, labels, per_task),
               "Each run's final score per seed (triangles, one row per run) against the leaderboard's "
               "scores (grey histogram) and its thresholds; better is always to the right."),
        Figure("normalized", plots.normalized_bars(tasks, labels, per_task),
               "Mean normalized score per task (invalid runs count 0)."),
    ]
    return [Section("Scores per task", tuple(blocks))]


def comparison_section(runs: Sequence[LoadedRun]) -> list[Section]:
    done = [r for r in runs if _agg(r)]
    if len(done) < 2:
        return []
    base = _agg(done[0])["metrics"]
    keys = (("valid_submission", "valid %", 100.0), ("above_median", "above median %", 100.0),
            ("any_medal", "any medal %", 100.0), ("gold_medal", "gold %", 100.0),
            ("normalized_score", "normalized", 1.0), ("steps_to_first_valid", "steps to 1st valid", 1.0))
    rows = []
    for run in done[1:]:
        m = _agg(run)["metrics"]
        row: list[Any] = [run.label]
        for key, _, scale in keys:
            a, b = base[key]["mean"], m[key]["mean"]
            row.append(None if a is None or b is None else f"{(b - a) * scale:+.3g}")
        rows.append(tuple(row))
    return [Section(f"Compared with {done[0].label}", (
        Table(("run", *(name for _, name, _ in keys)), tuple(rows),
              f"difference of each mean from {done[0].label}'s (same units as the summary)"),))]


def runs_section(runs: Sequence[LoadedRun]) -> list[Section]:
    rows = []
    for run in runs:
        for r in _agg(run).get("reports", []):
            medal = next((m for m in ("gold", "silver", "bronze") if r[f"{m}_medal"]), "–")
            rows.append((run.label, r["task_id"], r["seed"], r["score"], r["normalized_score"], medal,
                         r["valid_submission"], r["steps"], r["steps_to_first_valid"], r["wall_s"],
                         r["completion_tokens"], r["stopped_by"]))
        for m in _agg(run).get("runs", {}).get("missing", []):
            rows.append((run.label, m["task_id"], m["seed"], None, None, "–", None, None, None, None, None,
                         m["error"] or m["reason"]))
    if not rows:
        return []
    columns = ("run", "task", "seed", "score", "normalized", "medal", "valid", "steps", "1st valid",
               "wall s", "tokens", "stopped by / error")
    return [Section("All runs", (Table(columns, tuple(rows)),))]


for _fn in (summary_section, rates_section, tasks_section, comparison_section, runs_section):
    register_section("eval", _fn)
