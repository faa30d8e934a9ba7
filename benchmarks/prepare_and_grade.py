"""Time the built-in suite's data path: prepare, verify, grade, build the leaderboard.

For every built-in task, in a fresh temporary data root:

    prepare      a forced preparation (the preparer, checks, checksums, atomic rename)
    verify       checking that intact preparation again (every file re-hashed; first check)
    grade        grading the task's sample submission (`mleforge.grading.grader.grade`)
    leaderboard  building the reference leaderboard (skipped with --no-leaderboard)

Usage:
    python benchmarks/prepare_and_grade.py [--out timings.json] [--no-leaderboard] [ids ...]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import pandas as pd
from rich.console import Console
from rich.table import Table

from _record import invocation, table, write_result
from mleforge.grading.grader import grade
from mleforge.reference.leaderboard import build_leaderboard, library_versions
from mleforge.tasks.preparation import prepare
from mleforge.tasks.registry import TaskRegistry

STAGES = ("prepare_s", "verify_s", "grade_s", "leaderboard_s")


def _timed(fn, *args, **kwargs):
    start = time.perf_counter()
    result = fn(*args, **kwargs)
    return result, time.perf_counter() - start


def bench_task(task, leaderboard: bool) -> dict:
    _, prepare_s = _timed(prepare, task, force=True)
    verified, verify_s = _timed(prepare, task)
    if verified.status != "verified":
        raise RuntimeError(f"{task.id}: a fresh preparation did not verify ({verified.reason})")
    report, grade_s = _timed(grade, task, task.sample_submission_path)
    row = {
        "id": task.id,
        "train_rows": len(pd.read_csv(task.public_dir / "train.csv")),
        "test_rows": len(pd.read_csv(task.public_dir / "test.csv")),
        "prepare_s": prepare_s,
        "verify_s": verify_s,
        "grade_s": grade_s,
        "sample_valid": report.valid_submission,
        "sample_score": report.score,
        "leaderboard_s": None,
        "leaderboard_entries": None,
    }
    if leaderboard:
        board, row["leaderboard_s"] = _timed(build_leaderboard, task)
        row["leaderboard_entries"] = len(board)
    return row


def _fmt(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds:.3f}"


def render(rows: list[dict], totals: dict, console: Console) -> None:
    table = Table(title="built-in suite: prepare, verify, grade, leaderboard (seconds)")
    for name in ("task", "train rows", "test rows", "prepare", "verify", "grade", "leaderboard", "entries"):
        table.add_column(name, justify="left" if name == "task" else "right", no_wrap=True)
    for r in rows:
        table.add_row(
            r["id"], str(r["train_rows"]), str(r["test_rows"]), _fmt(r["prepare_s"]), _fmt(r["verify_s"]),
            _fmt(r["grade_s"]), _fmt(r["leaderboard_s"]), str(r["leaderboard_entries"] or "-"),
        )
    table.add_section()
    table.add_row(
        "total", str(totals["train_rows"]), str(totals["test_rows"]),
        *(_fmt(totals[s]) for s in STAGES), str(totals["leaderboard_entries"] or "-"),
    )
    console.print(table)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("ids", nargs="*", help="task ids (default: every built-in task)")
    parser.add_argument("--out", type=Path, help="write the timings as JSON to this file")
    parser.add_argument("--no-leaderboard", action="store_true", help="skip building the leaderboards")
    args = parser.parse_args(argv)

    # Piped output gets the width of a wide terminal rather than rich's 80 columns.
    console = Console(width=shutil.get_terminal_size((120, 24)).columns)
    rows = []
    with tempfile.TemporaryDirectory(prefix="mleforge-bench-") as root:
        registry = TaskRegistry(data_dir=root, mlebench=False)
        tasks = [registry.get(i) for i in args.ids] if args.ids else registry.tasks()
        for task in tasks:
            with console.status(f"{task.id}..."):
                rows.append(bench_task(task, leaderboard=not args.no_leaderboard))
    totals = {key: sum(r[key] for r in rows) for key in ("train_rows", "test_rows", "prepare_s", "verify_s", "grade_s")}
    built = [r for r in rows if r["leaderboard_s"] is not None]
    totals["leaderboard_s"] = sum(r["leaderboard_s"] for r in built) if built else None
    totals["leaderboard_entries"] = sum(r["leaderboard_entries"] for r in built) if built else None
    render(rows, totals, console)
    if args.out:
        ran = invocation(__file__, argv)
        write_result(args.out, "prepare_and_grade", result_table(rows, totals), argv=ran,
                     versions=library_versions(), tasks=rows, totals=totals)
        console.print(f"wrote {args.out}")
    return 0


def result_table(rows: list[dict], totals: dict) -> dict:
    """The results page's table: the printed one, seconds per stage and task."""
    columns = ["task", "train rows", "test rows", "prepare s", "verify s", "grade s", "leaderboard s", "entries"]
    body = [[r["id"], r["train_rows"], r["test_rows"], *(r[s] for s in STAGES), r["leaderboard_entries"]]
            for r in rows]
    body.append(["total", totals["train_rows"], totals["test_rows"], *(totals[s] for s in STAGES),
                 totals["leaderboard_entries"]])
    return table("built-in suite: prepare, verify, grade, leaderboard (seconds)", columns, body)


if __name__ == "__main__":
    raise SystemExit(main())
