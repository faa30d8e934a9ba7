"""What the policy benchmarks (agent.py, eval_lite.py) share: per-policy options and the per-task table."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.table import Table


def per_policy(text: str, n: int, kind: type) -> list[Any]:
    """One value for every policy, or one per policy, comma-separated."""
    values = [kind(v) for v in text.split(",")]
    if len(values) not in (1, n):
        raise SystemExit(f"give one value or {n} (one per policy): {text!r}")
    return values * n if len(values) == 1 else values


def console() -> Console:
    out = Console()
    if not out.is_terminal:  # logs and pipes get whole tables, not wrapped cells
        out.width = max(out.width, 180)
    return out


def per_task_table(title: str, results: dict[str, Any], cell: Callable[[dict[str, Any]], str]) -> Table:
    """A row per task, a column per policy; `cell` renders one policy's entry of a task
    (from its result's `per_task`); a task a policy did not run shows "-"."""
    table = Table(title=title)
    table.add_column("task")
    for r in results.values():
        table.add_column(r["policy"])
    ids = list(dict.fromkeys(t["task_id"] for r in results.values() for t in r["per_task"]))
    for task_id in ids:
        cells = []
        for r in results.values():
            entry = next((t for t in r["per_task"] if t["task_id"] == task_id), None)
            cells.append("-" if entry is None or not entry["runs"] else cell(entry))
        table.add_row(task_id, *cells)
    return table
