"""Printing: rich tables for people, `--json` for scripts (the same content)."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.table import Table


def _console(stderr: bool = False) -> Console:
    made = Console(stderr=stderr)
    # Piped output (logs, tests, scripts) gets wide tables instead of wrapped cells.
    if not made.is_terminal:
        made.width = max(made.width, 160)
    return made


console = _console()
err_console = _console(stderr=True)


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")


def fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.5g}"
    if isinstance(value, (list, tuple)):
        return ", ".join(map(str, value))
    return str(value)


def print_table(title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    table = Table(title=title, show_lines=False)
    for column in columns:
        table.add_column(column)
    for row in rows:
        table.add_row(*(fmt(v) for v in row))
    console.print(table)


# One row per graded submission, as `grade`, `exec`, `tasks solve` and `run` print it.
REPORT_COLUMNS = ["task", "metric", "score", "graded on", "public score", "normalized", "medal", "above median",
                  "valid", "reason"]


def medal(report) -> str:
    for name in ("gold", "silver", "bronze"):
        if getattr(report, f"{name}_medal"):
            return name
    return "-"


def report_row(report) -> list:
    return [report.competition_id, report.metric, report.score, report.part, report.public_score,
            report.normalized_score, medal(report),
            report.above_median, report.valid_submission, report.invalid_reason]
