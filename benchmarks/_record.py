"""What every benchmark's JSON shares, so that the docs can render it as a results page.

A result the docs cite is committed as `benchmarks/results/<name>.json` and has

    "benchmark": "<name>"
    "meta":  {"command": ..., "date": ISO-8601 (UTC), "commit": git sha, "machine": ...}
    "table": {"title": ..., "columns": [...], "rows": [[...], ...]}

plus whatever else the benchmark records. `docs/_ext/results.py` turns each file into a page
of docs/results/ at build time. A script builds its own table and calls `write_result`:

    from _record import write_result
    write_result(args.out, "hostile_grading", table, grading=rows, poll=poll)

`meta()` reads the command line, the clock, the checkout's commit (with "-dirty" when
tracked files differ from it, so that a figure is never credited to code that did not
make it) and the machine; `table(...)` checks a table's shape before anything is written.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import shlex
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def _commit() -> str:
    """The checkout's commit, "-dirty" when tracked files differ from it; "unknown" outside git."""
    try:
        sha = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True,
                             text=True, check=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return f"{sha}-dirty" if dirty else sha


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _memory_gb() -> float | None:
    try:
        return round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    except (ValueError, OSError, AttributeError):
        return None


def machine() -> str:
    """One line: the CPU, the cores this process may use, memory, OS and Python."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    memory = _memory_gb()
    parts = [_cpu_model(), f"{cores} cores"]
    if memory is not None:
        parts.append(f"{memory} GB RAM")
    parts += [f"{platform.system()} {platform.release()}", f"Python {platform.python_version()}"]
    return ", ".join(parts)


def command(argv: Sequence[str] | None = None) -> str:
    """The command that ran, as a user would type it: `python benchmarks/<script> ARGS`."""
    argv = list(sys.argv if argv is None else argv)
    script = Path(argv[0]) if argv else Path("?")
    if script.resolve().is_relative_to(ROOT):
        script = script.resolve().relative_to(ROOT)
    return shlex.join(["python", str(script), *argv[1:]])


def meta(argv: Sequence[str] | None = None) -> dict[str, str]:
    return {
        "command": command(argv),
        "date": _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat(),
        "commit": _commit(),
        "machine": machine(),
    }


def table(title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> dict[str, Any]:
    """The table a results page shows; every row has one cell per column."""
    columns = [str(c) for c in columns]
    out = []
    for i, row in enumerate(rows):
        if len(row) != len(columns):
            raise ValueError(f"table {title!r}: row {i} has {len(row)} cells for {len(columns)} columns")
        out.append(list(row))
    return {"title": title, "columns": columns, "rows": out}


def write_result(path: str | Path | None, benchmark: str, result_table: dict[str, Any],
                 argv: Sequence[str] | None = None, **extra: Any) -> dict[str, Any]:
    """The benchmark's record (`benchmark`, `meta`, `table`, then `extra`), written as JSON to
    `path` when one is given (its folder made); returned either way."""
    missing = {"title", "columns", "rows"} - set(result_table)
    if missing:
        raise ValueError(f"a result's table needs {sorted(missing)}; build it with _record.table(...)")
    record = {"benchmark": benchmark, "meta": meta(argv), "table": result_table, **extra}
    if path is not None:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(record, indent=2, default=str) + "\n", encoding="utf-8")
    return record


def print_table(result_table: dict[str, Any]) -> None:
    """The table on the terminal, as the results page shows it."""
    import shutil

    from rich.console import Console
    from rich.table import Table

    shown = Table(title=result_table["title"])
    for column in result_table["columns"]:
        shown.add_column(column)
    for row in result_table["rows"]:
        shown.add_row(*(format_cell(v) for v in row))
    Console(width=max(120, shutil.get_terminal_size((120, 24)).columns)).print(shown)


def format_cell(value: Any) -> str:
    """How a cell reads: floats to 4 significant digits, None as "-"."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)
