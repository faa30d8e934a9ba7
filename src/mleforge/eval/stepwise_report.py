"""Tables of step-wise evaluations: one result's figures, several side by side, and the paired
comparison of stages (before, after the warm start, after GRPO), for `mleforge report`.

    columns, rows = stages_table([("before", r0), ("after SFT", r1), ("after", r2)])
    comparisons = stage_comparisons([...])     # after SFT − before, after − after SFT, after − before

The report section "stepwise" (a folder `mleforge eval --stepwise` wrote) is registered here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from mleforge.errors import ConfigError
from mleforge.eval.report import Callout, LoadedRun, Section, Table, Text, register_section
from mleforge.eval.stepwise import METRICS, StepwiseResult
from mleforge.eval.stepwise_compare import (
    StepwiseComparison,
    compare_results,
    comparison_caption,
    comparison_rows,
    null_control,
)

HEADROOM_ROW = "states with headroom (the figures' n)"
FLAT_ROW = "states without headroom (apart)"


def _number(value: float, scale: float) -> str:
    """Rates in percent with one decimal; rewards with three."""
    return f"{value * scale:.1f}" if scale != 1.0 else f"{value:.3f}"


def pm(metric: Mapping[str, Any], scale: float) -> str:
    """'mean ± sem' of a metric; '–' when there is no value."""
    if metric.get("mean") is None:
        return "–"
    sem = "" if metric.get("sem") is None else f" ± {_number(metric['sem'], scale)}"
    return _number(metric["mean"], scale) + sem


def stages_table(stages: Sequence[tuple[str, StepwiseResult]]) -> tuple[tuple[str, ...], list[tuple[str, ...]]]:
    """Columns and rows: each evaluation's figures (mean ± SEM over states with headroom), then
    the counts of states, of samples per state, and of states without headroom."""
    columns = ("metric", *(label for label, _ in stages))
    rows: list[tuple[str, ...]] = [(name, *(pm(r.metrics[key], scale) for _, r in stages))
                                   for key, name, scale in METRICS]
    rows.append((HEADROOM_ROW, *(str(len(r.states) - r.no_headroom["n_states"]) for _, r in stages)))
    rows.append(("samples per state (seeds)", *(str(len(r.seeds) or 1) for _, r in stages)))
    rows.append((FLAT_ROW, *(str(r.no_headroom["n_states"]) for _, r in stages)))
    return columns, rows


def flat_table(stages: Sequence[tuple[str, StepwiseResult]]) -> Table | None:
    """The states without headroom, apart: their figures under each evaluation, and their ids."""
    flat = [(label, r) for label, r in stages if r.no_headroom["n_states"]]
    if not flat:
        return None
    rows = [(name, *(pm(r.no_headroom["metrics"][key], scale) for _, r in flat)) for key, name, scale in METRICS]
    ids = ", ".join(s[:12] for s in flat[0][1].no_headroom["states"])
    return Table(("metric", *(label for label, _ in flat)), tuple(rows),
                 f"states without headroom (their reference score is the metric's perfect value; left out of the "
                 f"figures above): {ids}")


def stage_comparisons(stages: Sequence[tuple[str, StepwiseResult]]) -> list[StepwiseComparison]:
    """The paired comparison of each evaluation with the one before it, and with three or more,
    the last with the first (after − before)."""
    if len(stages) < 2:
        raise ConfigError(f"a comparison needs two or more evaluations, got {len(stages)}")
    pairs = list(zip(stages, stages[1:]))
    if len(stages) > 2:
        pairs.append((stages[0], stages[-1]))
    return [compare_results(a, b, labels=(la, lb)) for (la, a), (lb, b) in pairs]


def comparison_table(comparison: StepwiseComparison) -> Table:
    columns, rows = comparison_rows(comparison)
    return Table(columns, tuple(rows), comparison_caption(comparison))


def null_table(result: StepwiseResult, label: str) -> Table | None:
    """The null control of one evaluation (its seeds split in halves); None with one seed."""
    if len(result.seeds) < 2:
        return None
    control = null_control(result, label)
    columns, rows = comparison_rows(control)
    return Table(columns, tuple(rows), "null control: " + comparison_caption(control) +
                 ". Nothing differs but the sampling seeds, so each interval should cover 0 (19 times in 20)")


def _result(run: LoadedRun) -> StepwiseResult | None:
    data = run.files.get("stepwise")
    return None if not data else StepwiseResult.from_dict(data)


def stepwise_section(runs: Sequence[LoadedRun]) -> list[Section]:
    done = [(r, _result(r)) for r in runs]
    blocks: list[Any] = []
    for run, result in done:
        if result is None:
            blocks.append(Callout(f"{run.label}: no stepwise.json in {run.path} (the evaluation never finished)"))
        elif (result.contamination or {}).get("warning"):
            blocks.append(Callout(f"{run.label}: {result.contamination['warning']}"))
    results = [(r.label, x) for r, x in done if x is not None]
    if not results:
        return [Section("Step-wise evaluation", tuple(blocks))]
    columns, rows = stages_table(results)
    blocks.append(Table(columns, tuple(rows), "mean ± SEM over states with headroom (a state's seeds averaged "
                                              "first; sample std / sqrt(n))"))
    flat = flat_table(results)
    if flat is not None:
        blocks.append(flat)
    base_label, base = results[0]
    for label, result in results[1:]:
        try:
            blocks.append(comparison_table(compare_results(base, result, labels=(base_label, label))))
        except ConfigError as exc:
            blocks.append(Callout(f"{base_label} and {label} are not paired: {exc}", "note"))
    for label, result in results:
        control = null_table(result, label)
        if control is not None:
            blocks.append(control)
    blocks.append(Text("k sampled completions per state (one per sampling seed), at the same sampling settings "
                       "for every run; states from expert journals. Improvement counts improve states whose run "
                       "beat the state's best; score gain is the positive part of the reward's delta."))
    return [Section("Step-wise evaluation", tuple(blocks))]


register_section("stepwise", stepwise_section)
