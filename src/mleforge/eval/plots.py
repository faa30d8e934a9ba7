"""The evaluation report's plots, as PNG bytes (matplotlib's object API: no pyplot, no global state).

Each plot takes plain data (labels, the aggregate's dicts) and compares any number of runs,
one colour per run, in the order given.
"""

from __future__ import annotations

import io
import math
from collections.abc import Mapping, Sequence
from typing import Any

from mleforge.errors import MleforgeError

RUN_COLORS = ("#0969da", "#d1242f", "#1a7f37", "#8250df", "#bf8700", "#1b7c83", "#cf4c9a", "#57606a")
MEDAL_COLORS = {"gold": "#d4a017", "silver": "#8c959f", "bronze": "#b4662a", "median": "#24292f"}
RATE_LABELS = (("valid_submission", "valid submission"), ("above_median", "above median"),
               ("any_medal", "any medal"), ("gold_medal", "gold"), ("silver_medal", "silver"),
               ("bronze_medal", "bronze"))


def _figure(width: float, height: float) -> Any:
    try:
        from matplotlib.figure import Figure
    except ImportError:  # mlxtend, a core dependency, brings matplotlib; a trimmed install may not
        raise MleforgeError("the report's plots need matplotlib: pip install matplotlib") from None
    return Figure(figsize=(width, height), layout="constrained")


def _png(fig: Any) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110, facecolor="white")
    return buffer.getvalue()


def color(i: int) -> str:
    return RUN_COLORS[i % len(RUN_COLORS)]


def rate_bars(labels: Sequence[str], metrics: Sequence[Mapping[str, Any]]) -> bytes:
    """Grouped bars: per rate (valid, above median, medals) one bar per run, mean ± SEM over seeds, in %."""
    fig = _figure(10, 3.8)
    ax = fig.subplots()
    n = max(1, len(labels))
    width = 0.8 / n
    for i, (label, m) in enumerate(zip(labels, metrics)):
        xs = [k + (i - (n - 1) / 2) * width for k in range(len(RATE_LABELS))]
        means = [100 * (m[key]["mean"] or 0.0) for key, _ in RATE_LABELS]
        sems = [100 * (m[key]["sem"] or 0.0) for key, _ in RATE_LABELS]
        bars = ax.bar(xs, means, width * 0.92, yerr=sems, capsize=3, color=color(i), label=label,
                      error_kw={"elinewidth": 1, "ecolor": "#24292f"})
        ax.bar_label(bars, labels=[f"{v:.0f}" for v in means], padding=2, fontsize=8)
    ax.set_xticks(range(len(RATE_LABELS)), [name for _, name in RATE_LABELS])
    for tick, (key, _) in zip(ax.get_xticklabels(), RATE_LABELS):
        medal = key.removesuffix("_medal")
        if medal in MEDAL_COLORS:
            tick.set_color(MEDAL_COLORS[medal])
            tick.set_fontweight("bold")
    ax.set_ylim(0, 112)
    ax.set_ylabel("% of runs (mean ± SEM over seeds)")
    ax.grid(axis="y", alpha=0.3)
    ax.spines[["top", "right"]].set_visible(False)
    fig.legend(loc="outside right upper", frameon=False, fontsize=9)
    return _png(fig)


def task_panels(tasks: Sequence[str], boards: Mapping[str, Any], labels: Sequence[str],
                per_task: Sequence[Mapping[str, Mapping[str, Any]]]) -> bytes:
    """One panel per task: the leaderboard's scores (histogram), its medal and median thresholds,
    and each run's final scores (one marker per seed; a row per run). Better is always right."""
    cols = min(4, max(1, len(tasks)))
    rows = math.ceil(len(tasks) / cols)
    fig = _figure(3.4 * cols, 2.6 * rows + 0.6)
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    for ax, task_id in zip(axes, tasks):
        board = boards.get(task_id, {})
        scores = board.get("scores", [])
        lower = bool(board.get("is_lower_better"))
        first = next((p[task_id] for p in per_task if p.get(task_id) and p[task_id].get("thresholds")), None)
        marks = dict((first or {}).get("thresholds") or {})
        got = [s for p in per_task for s in ((p.get(task_id) or {}).get("scores") or {}).values() if s is not None]
        span = _span(scores, lower, [*marks.values(), *got])
        if scores:
            ax.hist(scores, bins=25, range=span, color="#d0d7de", edgecolor="#afb8c1")
        for name, value in marks.items():
            ax.axvline(value, color=MEDAL_COLORS[name], lw=1.6, ls="--" if name == "median" else "-")
        if span is not None:
            ax.set_xlim(*span)
        top = ax.get_ylim()[1] or 1.0
        ax.set_ylim(0, top * (1.25 + 0.14 * len(labels)))
        for i, runs in enumerate(per_task):
            summary = runs.get(task_id) or {}
            got = [s for s in (summary.get("scores") or {}).values() if s is not None]
            y = top * (1.12 + 0.14 * i)
            ax.scatter(got, [y] * len(got), marker="v", s=42, color=color(i), edgecolor="white", lw=0.6,
                       zorder=3)
            invalid = summary.get("runs", 0) - summary.get("valid", 0)
            if invalid:
                ax.annotate(f"{invalid} invalid", (0.02, y / ax.get_ylim()[1]), xycoords="axes fraction",
                            fontsize=7, color=color(i), va="center")
        if lower:
            ax.invert_xaxis()
        direction = "lower is better" if lower else "higher is better"
        ax.set_title(f"{task_id}\n{board.get('metric', '')} ({direction})", fontsize=9)
        ax.tick_params(labelsize=7)
        ax.set_yticks([])
        ax.spines[["top", "right", "left"]].set_visible(False)
    for ax in axes[len(tasks):]:
        ax.set_visible(False)
    _legend(fig, labels, per_row=max(3, 2 * cols))
    return _png(fig)


def _span(scores: Sequence[float], lower: bool, keep: Sequence[float]) -> tuple[float, float] | None:
    """The x range of a task panel: the better 80% of the leaderboard (a few very weak entries
    would squeeze the medal zone into a sliver) plus every threshold and run score, padded."""
    values = sorted(scores, reverse=not lower)  # best first
    values = values[:max(1, math.ceil(0.8 * len(values)))] + list(keep)
    if not values:
        return None
    lo, hi = min(values), max(values)
    pad = (hi - lo) * 0.06 or abs(hi) * 0.05 or 0.05
    return lo - pad, hi + pad


def _legend(fig: Any, labels: Sequence[str], per_row: int) -> None:
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], marker="v", ls="", color=color(i), label=label) for i, label in enumerate(labels)]
    handles += [Line2D([], [], color=c, ls="--" if name == "median" else "-", label=name)
                for name, c in MEDAL_COLORS.items()]
    handles.append(Line2D([], [], color="#d0d7de", lw=6, label="leaderboard"))
    fig.legend(handles=handles, loc="outside lower center", ncol=min(per_row, len(handles)), frameon=False,
               fontsize=8)


def normalized_bars(tasks: Sequence[str], labels: Sequence[str],
                    per_task: Sequence[Mapping[str, Mapping[str, Any]]]) -> bytes:
    """Per task, each run's mean normalized score (0 = sample submission, 1 = leaderboard best;
    invalid runs count 0)."""
    fig = _figure(10, 0.9 + 0.32 * len(tasks) * max(1, len(labels)) ** 0.6)
    ax = fig.subplots()
    n = max(1, len(labels))
    height = 0.8 / n
    lowest = 0.0
    for i, (label, runs) in enumerate(zip(labels, per_task)):
        values = [(runs.get(t) or {}).get("mean_normalized_score") for t in tasks]
        ys = [k + (i - (n - 1) / 2) * height for k in range(len(tasks))]
        ax.barh(ys, [v if v is not None else 0.0 for v in values], height * 0.9, color=color(i), label=label)
        lowest = min([lowest, *(v for v in values if v is not None)])
    ax.set_yticks(range(len(tasks)), tasks, fontsize=8)
    ax.invert_yaxis()
    ax.axvline(0, color="#57606a", lw=1)
    ax.axvline(1, color=MEDAL_COLORS["gold"], lw=1.2, ls="--")
    # A run far worse than the sample submission would squeeze every other bar: clip at -1.
    ax.set_xlim(max(-1.0, lowest) - 0.05, 1.08)
    ax.set_xlabel("mean normalized score (0 = sample submission, 1 = leaderboard best)")
    ax.grid(axis="x", alpha=0.3)
    ax.spines[["top", "right"]].set_visible(False)
    fig.legend(loc="outside right upper", frameon=False, fontsize=8)
    return _png(fig)


CURVES = (("reward_mean", "mean reward"), ("valid_rate", "valid rate"),
          ("frac_zero_std_groups", "groups with tied rewards"), ("buffer_size", "states in the buffer"))


def step_curves(labels: Sequence[str], runs: Sequence[Sequence[Mapping[str, Any]]]) -> bytes:
    """A training run's curves over steps, one panel per figure of `CURVES` (metrics.jsonl
    lines), one line per run; the reward panel shades ± the step's reward std."""
    fig = _figure(11, 6.4)
    axes = fig.subplots(2, 2).ravel()
    for ax, (key, title) in zip(axes, CURVES):
        for i, (label, lines) in enumerate(zip(labels, runs)):
            points = [(m["step"], m[key]) for m in lines if m.get(key) is not None]
            if not points:
                continue
            xs, ys = zip(*points)
            ax.plot(xs, ys, marker="o", ms=3, lw=1.4, color=color(i), label=label)
            if key == "reward_mean":
                spread = [(m["step"], m["reward_mean"], m.get("reward_std") or 0.0) for m in lines
                          if m.get("reward_mean") is not None]
                sx, mean, std = zip(*spread)
                ax.fill_between(sx, [a - b for a, b in zip(mean, std)], [a + b for a, b in zip(mean, std)],
                                color=color(i), alpha=0.15, lw=0)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("step", fontsize=8)
        if key in ("valid_rate", "frac_zero_std_groups"):
            ax.set_ylim(-0.03, 1.03)
        ax.grid(alpha=0.3)
        ax.tick_params(labelsize=8)
        ax.spines[["top", "right"]].set_visible(False)
    handles, names = axes[0].get_legend_handles_labels()
    if handles:
        fig.legend(handles, names, loc="outside lower center", ncol=min(4, len(names)), frameon=False, fontsize=8)
    return _png(fig)


def loss_curve(labels: Sequence[str], runs: Sequence[Sequence[Mapping[str, Any]]]) -> bytes:
    """SFT training loss over optimizer steps, one line per run."""
    fig = _figure(8, 3.4)
    ax = fig.subplots()
    for i, (label, lines) in enumerate(zip(labels, runs)):
        points = [(m["step"], m["loss"]) for m in lines if m.get("loss") is not None]
        if points:
            xs, ys = zip(*points)
            ax.plot(xs, ys, lw=1.4, color=color(i), label=label)
    ax.set_xlabel("step")
    ax.set_ylabel("loss (completion tokens)")
    ax.grid(alpha=0.3)
    ax.spines[["top", "right"]].set_visible(False)
    if labels:
        ax.legend(frameon=False, fontsize=8)
    return _png(fig)
