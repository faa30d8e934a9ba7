"""The report sections of training runs (kinds "train" and "sft"), in `mleforge report`'s registry.

A train run's report: a summary (what was trained, how far, first against last steps), its
curves over steps (reward, valid rate, groups whose rewards all tie, buffer size), the
step-wise evaluation before and after training side by side, where the time of a step
went, and the last steps' figures. Several runs (an ablation and its baseline) appear side
by side in each table and plot. Reads run.json, metrics.jsonl and stepwise/*.json; no torch.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mleforge.eval import plots
from mleforge.eval.report import Callout, Figure, LoadedRun, Section, Table, Text, register_section
from mleforge.runs import METRICS_FILE, STEPWISE_DIR

EDGE_STEPS = 3  # "first" and "last" figures are means over this many steps
TABLE_STEPS = 30


def metrics(run: LoadedRun) -> list[dict[str, Any]]:
    path = Path(run.path) / METRICS_FILE
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _mean(values: Sequence[float | None]) -> float | None:
    kept = [v for v in values if v is not None]
    return sum(kept) / len(kept) if kept else None


def _edges(lines: list[dict[str, Any]], key: str) -> str:
    if not lines:
        return "–"
    first, last = _mean([m[key] for m in lines[:EDGE_STEPS]]), _mean([m[key] for m in lines[-EDGE_STEPS:]])
    shown = ["–" if v is None else f"{v:.3g}" for v in (first, last)]
    return f"{shown[0]} → {shown[1]}"


def _stepwise(run: LoadedRun, label: str) -> dict[str, Any]:
    path = Path(run.path) / STEPWISE_DIR / f"{label}.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def summary_section(runs: Sequence[LoadedRun]) -> list[Section]:
    rows, notes = [], []
    for run in runs:
        lines, record = metrics(run), run.record
        if record.get("status") != "done":
            notes.append(Callout(f"{run.label}: the run has not finished ({len(lines)} of {record.get('steps')} "
                                 f"steps written); `mleforge train --resume {run.path}` continues it"))
        rows.append((
            run.label, record.get("preset"), record.get("sampler"), "yes" if record.get("buffer_growth") else "no",
            record.get("sft"), len(record.get("tasks", [])), f"{len(lines)}/{record.get('steps')}",
            _edges(lines, "reward_mean"), _edges(lines, "valid_rate"), _edges(lines, "format_error_rate"),
            _edges(lines, "frac_zero_std_groups"), _edges(lines, "buffer_size"), record.get("wall_s"),
        ))
    columns = ("run", "preset", "sampler", "buffer grows", "sft", "tasks", "steps", "reward", "valid rate",
               "format errors", "tied groups", "buffer size", "wall s")
    return [Section("Training", (*notes, Table(columns, tuple(rows), f"first → last: means over the first and last "
                                                                     f"{EDGE_STEPS} steps"),
                                 Text("Rates are over every rollout of a step; a tied group is one whose rewards "
                                      "all equal (zero advantage: GRPO learns nothing from it).")))]


def curves_section(runs: Sequence[LoadedRun]) -> list[Section]:
    series = [metrics(r) for r in runs]
    if not any(series):
        return []
    png = plots.step_curves([r.label for r in runs], series)
    return [Section("Curves", (Figure("train_curves", png, "Per step: mean reward (± its std, shaded), the share "
                                      "of valid submissions, the share of groups whose rewards all tie, and the "
                                      "buffer's live states."),))]


def stepwise_section(runs: Sequence[LoadedRun]) -> list[Section]:
    """Each run's step-wise evaluation before training, after its warm start (where there was
    one) and after, on the same states and sampling seeds: the figures side by side
    (mleforge.eval.stepwise_report.stages_table), then the paired differences after SFT − before,
    after − after SFT and after − before, and the null control of the evaluation before."""
    from mleforge.errors import ConfigError
    from mleforge.eval.stages import stepwise_stages
    from mleforge.eval.stepwise_report import (
        comparison_table,
        flat_table,
        null_table,
        stage_comparisons,
        stages_table,
    )

    blocks: list[Any] = []
    for run in runs:
        before, after = _stepwise(run, "before"), _stepwise(run, "after")
        if not before.get("available"):
            reason = before.get("reason", "no stepwise/before.json")
            blocks.append(Callout(f"{run.label}: no step-wise evaluation ({reason})", "note"))
            continue
        if not after.get("available"):
            blocks.append(Callout(f"{run.label}: the evaluation after training has not run yet", "note"))
            continue
        stages = stepwise_stages(Path(run.path))
        columns, rows = stages_table(stages)
        sft = _stepwise(run, "sft")
        warm = f", after the warm start ({sft.get('policy')})" if sft.get("available") else ""
        tasks = ", ".join(before.get("tasks", []))
        blocks.append(Table(columns, tuple(rows),
                            f"{run.label}: before ({before.get('policy')}, the model as given){warm} and after "
                            f"({after.get('policy')}) on {tasks}, tasks the run did not train on; mean ± SEM "
                            f"over states with headroom (a state's seeds averaged first); {_drawn(before)}"))
        flat = flat_table(stages)
        if flat is not None:
            blocks.append(flat)
        try:
            blocks += [comparison_table(c) for c in stage_comparisons(stages)]
        except ConfigError as exc:
            blocks.append(Callout(f"{run.label}: the evaluations are not paired ({exc})", "note"))
        control = null_table(stages[0][1], stages[0][0])
        if control is not None:
            blocks.append(control)
    return [Section("Before and after training", tuple(blocks))] if blocks else []


def _drawn(evaluation: dict[str, Any]) -> str:
    """What the state draw of an evaluation left out, in words."""
    draw = evaluation.get("draw") or {}
    if not draw:
        return "states drawn with no headroom rule"
    text = f"{draw['drawn']} states drawn of {draw['candidates']} candidates"
    if draw.get("dropped_no_headroom"):
        text += f", {draw['dropped_no_headroom']} dropped for want of headroom"
    if draw.get("filled_no_headroom"):
        text += f", {draw['filled_no_headroom']} without headroom filled up the draw (reported apart)"
    return text


def time_section(runs: Sequence[LoadedRun]) -> list[Section]:
    rows = []
    for run in runs:
        lines = metrics(run)
        if not lines:
            continue
        gen, exe, upd = (_mean([m[k] for m in lines]) or 0.0 for k in ("gen_s", "exec_s", "update_s"))
        total = gen + exe + upd
        rows.append((run.label, round(gen, 2), round(exe, 2), round(upd, 2), round(total, 2),
                     f"{exe / total:.0%}" if total else "–", _mean([m["tokens"] for m in lines]),
                     sum(m["cache_hits"] for m in lines)))
    if not rows:
        return []
    return [Section("Where a step's time goes", (Table(
        ("run", "generation s", "execution s", "update s", "step s", "execution share", "tokens / step",
         "cache hits"), tuple(rows), "means over steps"),))]


def steps_section(runs: Sequence[LoadedRun]) -> list[Section]:
    rows = []
    for run in runs:
        for m in metrics(run)[-TABLE_STEPS:]:
            rows.append((run.label, m["step"], m["reward_mean"], m["reward_std"], m["valid_rate"],
                         m["format_error_rate"], m["exec_error_rate"], m["timeout_rate"],
                         m["invalid_submission_rate"], m["lost_rate"], m["frac_zero_std_groups"], m["buffer_size"],
                         m["states_added"], m["sampler_entropy"]))
    if not rows:
        return []
    columns = ("run", "step", "reward", "std", "valid", "format err", "exec err", "timeout", "invalid", "lost",
               "tied groups", "buffer", "added", "sampler entropy")
    return [Section(f"Steps (the last {TABLE_STEPS})", (Table(columns, tuple(rows)),))]


def sft_section(runs: Sequence[LoadedRun]) -> list[Section]:
    rows, series = [], []
    for run in runs:
        r = run.record
        rows.append((run.label, r.get("model"), len(r.get("tasks", [])), r.get("samples"), r.get("dropped_long"),
                     r.get("steps"), r.get("loss_before"), r.get("loss_after"), r.get("wall_s")))
        series.append(metrics(run))
    blocks: list[Any] = [Table(("run", "model", "tasks", "samples", "too long", "steps", "loss before",
                                "loss after", "wall s"), tuple(rows),
                               "loss: mean NLL per completion token on (up to 32 of) the samples")]
    if any(series):
        blocks.append(Figure("sft_loss", plots.loss_curve([r.label for r in runs], series), "Training loss per step."))
    return [Section("Supervised fine-tuning", tuple(blocks))]


for _fn in (summary_section, curves_section, stepwise_section, time_section, steps_section):
    register_section("train", _fn)
register_section("sft", sft_section)
