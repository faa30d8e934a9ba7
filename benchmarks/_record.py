"""What every benchmark's JSON shares, so that the docs can render it as a results page.

A result the docs cite is committed as `benchmarks/results/<name>.json` and has

    "benchmark": "<name>"
    "meta":  {"command": ..., "date": ISO-8601 (UTC), "commit": git sha, "machine": ...}
    "table": {"title": ..., "columns": [...], "rows": [[...], ...]}

plus whatever else the benchmark records (`tables`: more tables, shown after the first).
`docs/_ext/results.py` turns each file into a page of docs/results/ at build time. A script
builds its table, calls `write_result` and prints it with `print_table`:

    from _record import print_table, write_result
    write_result(args.out, "hostile_grading", table, grading=rows, poll=poll)

A script that rewrites its --out as it goes (and resumes from it) passes its whole record
through `stamp` at every write instead, and writes it with `write_json`.

`meta()` reads the command line, the clock, the checkout's commit (with "-dirty" when
tracked files differ from it, so that a figure is never credited to code that did not
make it) and the machine; `table(...)` checks a table's shape before anything is written.
"""

from __future__ import annotations

import datetime as _dt
import functools
import json
import os
import platform
import re
import shlex
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


@functools.cache
def commit() -> str:
    """The checkout's commit, "-dirty" when tracked files differ from it; "unknown" outside git.
    Read once a process: the code it runs is the code of its first call, not of a commit made
    while it runs."""
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
        "commit": commit(),
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


def invocation(script: str | Path, argv: Sequence[str] | None = None) -> list[str]:
    """The command line of a benchmark's `main(argv)`: its script, then `argv` (None: this
    process's own arguments), for `meta`'s command when main is called from Python."""
    return [str(script), *(sys.argv[1:] if argv is None else argv)]


def _checked(result_table: Any) -> dict[str, Any]:
    if not isinstance(result_table, dict) or {"title", "columns", "rows"} - set(result_table):
        raise ValueError("a result's table needs title, columns and rows; build it with _record.table(...)")
    return table(result_table["title"], result_table["columns"], result_table["rows"])


def stamp(data: Mapping[str, Any], benchmark: str, result_table: dict[str, Any],
          argv: Sequence[str] | None = None) -> dict[str, Any]:
    """`data` in the convention: `benchmark`, this call's `meta` and `result_table` first, then
    the rest of `data` as it was. A resumable benchmark stamps its whole record at every write,
    so that a file an older version wrote (without meta) is brought into the convention by
    the next one, and `meta` names the call that wrote the figures last."""
    rest = {k: v for k, v in data.items() if k not in ("benchmark", "meta", "table")}
    if "tables" in rest:
        rest["tables"] = [_checked(t) for t in rest["tables"]]
    return {"benchmark": benchmark, "meta": meta(argv), "table": _checked(result_table), **rest}


def write_json(path: str | Path, record: Mapping[str, Any], indent: int = 2) -> None:
    """`record` as JSON in `path` (its folder made), atomically: a reader, or a resume after a
    kill, sees the old file or the new one, never half of one."""
    from mleforge.utils.atomic import atomic_write

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, dumps(record, indent) + "\n")


_SHORT_LIST = re.compile(r"\[[^\[\]{}]*\]")  # a list of scalars only, as json.dumps wrote it


def dumps(record: Any, indent: int = 2) -> str:
    """JSON with `indent`, but each list of scalars on one line (a table's row, a timeline's
    [seconds, MiB] pair), so a committed result stays a short, readable diff. Strings holding
    brackets are left as written."""
    text = json.dumps(record, indent=indent, default=str)

    def flatten(match: re.Match[str]) -> str:
        inner = match.group(0)
        if '"' in inner and any(c in inner[1:-1] for c in "[]{}"):
            return inner
        parts = [part.strip() for part in inner[1:-1].split("\n")]
        return "[" + " ".join(p for p in parts if p) + "]"

    flat = _SHORT_LIST.sub(flatten, text)
    return flat if json.loads(flat) == json.loads(text) else text


def write_result(path: str | Path | None, benchmark: str, result_table: dict[str, Any], /,
                 argv: Sequence[str] | None = None, **extra: Any) -> dict[str, Any]:
    """The benchmark's record (`benchmark`, `meta`, `table`, then `extra`, where `tables` holds
    any further tables), written as JSON to `path` when one is given; returned either way. A
    result that names its benchmark (or holds an old meta or table) may be passed whole as
    `extra`: the convention's keys are this call's."""
    record = stamp(extra, benchmark, result_table, argv)
    if path is not None:
        write_json(path, record)
    return record


def print_table(result_table: Mapping[str, Any]) -> None:
    """The table on the terminal as the CLI prints its own (mleforge.cli.output), floats to 4
    significant digits as the results page shows them; piped (a log), wide enough that a
    benchmark's many columns are not cut."""
    from rich.console import Console

    from mleforge.cli.output import print_table as show

    out = Console()
    if not out.is_terminal:
        out.width = max(out.width, 200)
    show(result_table["title"], result_table["columns"], result_table["rows"], precision=4, out=out)


def print_tables(record: Mapping[str, Any]) -> None:
    """A record's table, then its further `tables`."""
    for shown in [record["table"], *record.get("tables", [])]:
        print_table(shown)
