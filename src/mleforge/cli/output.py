"""Printing: rich tables for people, `--json` for scripts (the same content).

Whatever a script wrote (its output, a file name, a submission's header in a
reason) reaches the terminal only through `terminal_safe` and as rich `Text`,
never as markup: it can neither drive the terminal (escape sequences that move
the cursor, retitle the window, rewrite what was printed) nor style, hide or
break what we print (`[/x]` raises rich's MarkupError as markup).
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

# Escape sequences whole (CSI, OSC and the string commands DCS/SOS/PM/APC up to their
# terminator or the end, two-character ESC ones), then every other control character:
# C0 but newline and tab, DEL, and C1 (0x9b is an 8-bit CSI).
_CONTROL = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]?"
    r"|\x1b[\]PX^_][^\x07\x1b]*(?:\x07|\x1b\\)?"
    r"|\x1b[ -~]?"
    r"|[\x00-\x08\x0b-\x1f\x7f-\x9f]"
)


def terminal_safe(text: str) -> str:
    """`text` without terminal escape sequences or control characters (newlines and tabs kept)."""
    return _CONTROL.sub("", text)


def safe_text(text: str, **style: Any) -> Text:
    """`text` as rich Text (no markup), made terminal_safe."""
    return Text(terminal_safe(text), **style)


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


def fmt(value: Any, precision: int = 5) -> str:
    """A cell as it reads: None as "-", booleans as yes/no, floats to `precision` significant
    digits, lists comma-separated."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.{precision}g}"
    if isinstance(value, (list, tuple)):
        return ", ".join(map(str, value))
    return str(value)


def print_table(title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]], precision: int = 5,
                out: Console | None = None) -> None:
    """A table whose title, headers and cells print literally (see the module docstring); floats
    to `precision` significant digits; on `out` (default: stdout's console)."""
    table = Table(title=safe_text(title, style="table.title"), show_lines=False)
    for column in columns:
        table.add_column(safe_text(str(column)))
    for row in rows:
        table.add_row(*(safe_text(fmt(v, precision)) for v in row))
    (out or console).print(table)


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
