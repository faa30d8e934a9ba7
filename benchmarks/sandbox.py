"""Per-run overhead and throughput of the executors.

    python benchmarks/sandbox.py [--task titanic] [--repeats 10] [--out results.json]

Rows: an empty script and a pandas + scikit-learn import script, run as bare
`python script.py` (the floor), by the local executor unisolated, and by the
local executor under bwrap; then runs per second of the import script with 1, 2
and 4 concurrent workers. The data root is $MLEFORGE_DATA (the task is prepared
if needed).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SCRIPTS = {
    "empty": "pass\n",
    "pandas+sklearn": "import pandas, sklearn.ensemble\n",
}


def _bare(script: str, repeats: int) -> list[float]:
    times = []
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "script.py"
        path.write_text(script)
        for _ in range(repeats):
            start = time.perf_counter()
            subprocess.run([sys.executable, str(path)], cwd=folder, check=True, capture_output=True)
            times.append(time.perf_counter() - start)
    return times


def _executor_times(executor, script: str, task, repeats: int) -> list[float]:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        result = executor.run(script, task)
        times.append(time.perf_counter() - start)
        if not result.ok:
            raise SystemExit(f"benchmark script failed under {executor.isolation}: {result.stderr[-2000:]}")
    return times


def _row(backend: str, script: str, times: list[float]) -> dict:
    return {
        "backend": backend, "script": script, "runs": len(times),
        "median_s": round(statistics.median(times), 4), "min_s": round(min(times), 4),
        "p90_s": round(sorted(times)[int(0.9 * (len(times) - 1))], 4),
    }


def _throughput(executor, task, workers: int, runs: int) -> dict:
    scripts = [SCRIPTS["pandas+sklearn"]] * runs
    start = time.perf_counter()
    results = executor.run_many(scripts, task, max_workers=workers)
    elapsed = time.perf_counter() - start
    return {
        "backend": f"local ({executor.isolation})", "workers": workers, "runs": runs,
        "ok": sum(r.ok for r in results), "seconds": round(elapsed, 3),
        "runs_per_s": round(runs / elapsed, 3),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", default="titanic")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--throughput-runs", type=int, default=8)
    parser.add_argument("--out", help="write the rows as JSON here")
    args = parser.parse_args(argv)

    from rich.console import Console
    from rich.table import Table

    from mleforge.sandbox.local import LocalExecutor
    from mleforge.tasks.prepare import prepare
    from mleforge.tasks.registry import TaskRegistry

    task = TaskRegistry(mlebench=False).get(args.task)
    prepare(task)
    executors = [LocalExecutor("none")]
    bwrap = LocalExecutor("auto")
    if bwrap.isolation == "bwrap":
        executors.append(bwrap)
    else:
        bwrap.close()
    overhead, throughput = [], []
    try:
        for name, script in SCRIPTS.items():
            _bare(script, 1)  # warm the page cache for everyone alike
            overhead.append(_row("bare python", name, _bare(script, args.repeats)))
            for executor in executors:
                executor.run(script, task)
                times = _executor_times(executor, script, task, args.repeats)
                overhead.append(_row(f"local ({executor.isolation})", name, times))
        for executor in executors:
            for workers in (1, 2, 4):
                throughput.append(_throughput(executor, task, workers, args.throughput_runs))
    finally:
        for executor in executors:
            executor.close()

    console = Console()
    table = Table(title=f"per-run time on {task.id} (median of {args.repeats})")
    for column in ("backend", "script", "median s", "min s", "p90 s"):
        table.add_column(column)
    for row in overhead:
        table.add_row(row["backend"], row["script"], f"{row['median_s']:.3f}", f"{row['min_s']:.3f}",
                      f"{row['p90_s']:.3f}")
    console.print(table)
    table = Table(title=f"throughput: {args.throughput_runs} pandas+sklearn runs")
    for column in ("backend", "workers", "seconds", "runs/s", "ok"):
        table.add_column(column)
    for row in throughput:
        table.add_row(row["backend"], str(row["workers"]), f"{row['seconds']:.2f}", f"{row['runs_per_s']:.2f}",
                      f"{row['ok']}/{row['runs']}")
    console.print(table)
    if args.out:
        Path(args.out).write_text(json.dumps({"overhead": overhead, "throughput": throughput}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
