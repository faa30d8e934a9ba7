"""What hostile submissions and workspaces cost the parent (issue 31): the CPU, wall time and
peak memory of grading each submission below on titanic, in a fresh process each, and the
CPU the disk poll spends on a workspace of many files.

    fields     `PassengerId,Survived`, then `1,` x 533,551: one row of 533k fields, just
               under titanic's size cap (1,067,124 bytes); pandas made a 533k-level index
    commas     the header, then one line of commas up to the size cap
    long_line  the header, then one field of digits up to the size cap
    probabilities, carriage_return   two ordinary-looking ones that used to raise

    poll       a run's disk and memory checks, as `sandbox.process` schedules them, over
               --poll-s seconds of a workspace holding --files files: the parent's CPU
               spent, with the back-off (now) and without it (DISK_CHECK_BACKOFF = 0,
               as before)

Grading works with any version of mleforge (run it with PYTHONPATH at another checkout's
src to compare); the poll needs one with DISK_CHECK_BACKOFF.

Usage:
    python benchmarks/hostile_grading.py [--out costs.json] [--files 99000] [--poll-s 20] [--no-poll]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

from _record import print_table, table, write_result

CASES = ("fields", "commas", "long_line", "probabilities", "carriage_return")
HEADER = b"PassengerId,Survived\n"


def write_case(case: str, path: Path, task) -> None:
    from mleforge.grading.grader import load_answers
    from mleforge.grading.submission import submission_byte_limit

    room = submission_byte_limit(task.answers_path.stat().st_size) - len(HEADER) - 1
    if case == "fields":
        path.write_bytes(HEADER + b"1," * 533_551 + b"\n")
    elif case == "commas":
        path.write_bytes(HEADER + b"," * room)
    elif case == "long_line":
        path.write_bytes(HEADER + b"1," + b"9" * (room - 2))
    else:
        frame = pd.DataFrame({"PassengerId": load_answers(task)["PassengerId"], "Survived": 0.5})
        text = frame.to_csv(index=False)
        if case == "carriage_return":
            text = text.replace("Survived", "Surv\rived", 1).replace("0.5", "0")
        path.write_text(text, newline="")


def grade_one(case: str) -> dict:
    """Grade one case here (a fresh process): its costs and outcome."""
    from mleforge.grading.grader import grade
    from mleforge.tasks.preparation import prepare
    from mleforge.tasks.registry import TaskRegistry

    task = TaskRegistry(mlebench=False).get("titanic")
    prepare(task)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "submission.csv"
        write_case(case, path, task)
        size = path.stat().st_size
        rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        cpu, wall = time.process_time(), time.perf_counter()
        try:
            report = grade(task, path)
            outcome = {"valid": report.valid_submission, "reason": report.invalid_reason}
        except Exception as exc:  # what the issue found: grading raised
            outcome = {"valid": None, "raised": f"{type(exc).__name__}: {exc}"[:300]}
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"case": case, "bytes": size, "cpu_s": round(cpu, 4), "wall_s": round(wall, 4),
            "peak_rss_mb": round(peak / 1024, 1), "rss_growth_mb": round((peak - rss_before) / 1024, 1), **outcome}


def poll_cost(files: int, seconds: float, backoff: int | None) -> dict:
    """The CPU that a watch's disk checks take over `seconds` of a run whose workspace holds
    `files` files (backoff None: the module's own; 0: a fixed DISK_CHECK_S period)."""
    from mleforge.sandbox import process
    from mleforge.sandbox.launch import over_disk
    from mleforge.sandbox.limits import RunLimits
    from mleforge.sandbox.workspace import Workspace

    with tempfile.TemporaryDirectory() as folder:
        ws = Workspace(Path(folder), kept=False)
        working = ws.path / "working"
        working.mkdir(parents=True)
        for i in range(files):
            os.close(os.open(working / f"f{i}", os.O_CREAT | os.O_WRONLY, 0o600))
        saved = process.DISK_CHECK_BACKOFF
        if backoff is not None:
            process.DISK_CHECK_BACKOFF = backoff
        try:
            limits = RunLimits()
            progress = process._Progress(deadline=time.monotonic() + seconds + 60, next_disk=0.0,
                                         kill=lambda thorough: None)
            checks, cpu, end = 0, time.process_time(), time.monotonic() + seconds
            while time.monotonic() < end:
                progress.check_limits(None, lambda: over_disk(ws, limits), None)
                checks += 1
                time.sleep(max(0.0, min(progress.next_disk, end) - time.monotonic()))
            cpu = time.process_time() - cpu
        finally:
            process.DISK_CHECK_BACKOFF = saved
    return {"files": files, "run_s": seconds, "backoff": process.DISK_CHECK_BACKOFF if backoff is None else backoff,
            "checks": checks, "cpu_s": round(cpu, 3), "cpu_share": round(cpu / seconds, 4)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--files", type=int, default=99_000)
    parser.add_argument("--poll-s", type=float, default=20.0)
    parser.add_argument("--no-poll", action="store_true")
    parser.add_argument("--one", choices=CASES, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(grade_one(args.one)))
        return
    grading = []
    for case in CASES:
        done = subprocess.run([sys.executable, __file__, "--one", case], capture_output=True, text=True, check=True)
        grading.append(json.loads(done.stdout.strip().splitlines()[-1]))
        print(json.dumps(grading[-1]), flush=True)
    poll = []
    if not args.no_poll:
        for backoff in (0, None):
            poll.append(poll_cost(args.files, args.poll_s, backoff))
            print(json.dumps(poll[-1]), flush=True)
    costs = table("grading hostile submissions on titanic, each in a fresh process",
                  ["case", "bytes", "CPU s", "wall s", "peak RSS MB", "RSS growth MB", "outcome"],
                  [[g["case"], g["bytes"], g["cpu_s"], g["wall_s"], g["peak_rss_mb"], g["rss_growth_mb"],
                    _outcome(g)] for g in grading])
    print_table(costs)
    extra_tables = []
    if poll:
        extra_tables.append(table(f"the disk poll's CPU over a workspace of {args.files:,} files",
                                  ["back-off", "checks", "run s", "CPU s", "CPU share"],
                                  [[p["backoff"], p["checks"], p["run_s"], p["cpu_s"], p["cpu_share"]]
                                   for p in poll]))
        print_table(extra_tables[0])
    write_result(args.out, "hostile_grading", costs, tables=extra_tables, grading=grading, poll=poll)


def _outcome(graded: dict) -> str:
    if graded.get("raised"):
        return f"raised: {graded['raised']}"
    return "valid" if graded["valid"] else f"invalid: {graded['reason']}"


if __name__ == "__main__":
    main()
