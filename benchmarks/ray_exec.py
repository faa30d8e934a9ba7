"""Runs per second of the local executor against the Ray executor on a local Ray cluster.

    python benchmarks/ray_exec.py [--task titanic] [--runs 12] [--concurrency 1,2,4] [--rounds 2]
                                  [--nodes 2] [--cpus-per-node N] [--isolation auto] [--out bench-out/ray_exec.json]

The same scripts go through both executors: `empty` (a run's own cost: workspace, bwrap,
interpreter, clean-up) and `pandas-csv` (reads the task's train.csv with pandas and writes
a submission: the public data on the node, the submission's bytes coming back). For each
script and number of concurrent runs (`--concurrency`), `--runs` runs go through
`run_many(max_workers=c)`; the Ray executor also has `max_concurrent=c`. Every round times
each (script, concurrency, executor) once, in a rotated order, after one warm-up batch each
(Ray's workers started, the task data on its nodes); the table shows the median over rounds.

The Ray cluster is `ray.cluster_utils.Cluster`: `--nodes` nodes of `--cpus-per-node`
logical CPUs (default: enough for the largest concurrency, as each run asks for its task's
`cpus`, which the local executor does not count), each with its own task-data folder, all
on this machine. Its nodes share this
machine's cores, so the table is what the Ray executor adds per run (scheduling, the
object store, the result's transfer), not what more machines would gain. The JSON also
has, per node, how many runs it served and how many of them fetched the task data.
Writes JSON to --out (benchmark, meta, table, and the raw rounds) and prints the table.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = {
    "empty": "pass\n",
    "pandas-csv": (
        "import pandas as pd\n"
        "frame = pd.read_csv('input/train.csv')\n"
        "frame.head(50).to_csv('submission/submission.csv', index=False)\n"
    ),
}
COLUMNS = ["script", "concurrent runs", "local runs/s", "ray runs/s", "ray / local"]


def positive_counts(text: str) -> tuple[int, ...]:
    """`--concurrency 1,2,4`: positive integers, in the order given."""
    try:
        counts = tuple(int(part) for part in text.split(","))
    except ValueError:
        counts = ()
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError(f"expected comma-separated positive integers, as in 1,2,4; got {text!r}")
    return counts


def start_cluster(nodes: int, cpus: int, memory_mb: int, scratch: Path):
    """A local Ray cluster of `nodes` nodes of `cpus` logical CPUs and `memory_mb` of Ray's
    memory resource, each with its own task-data folder, connected."""
    import ray
    from ray.cluster_utils import Cluster

    from mleforge.sandbox.ray_node import DATA_ENV

    folders = []
    for i in range(nodes):
        folder = scratch / f"node-{i}-data"
        folder.mkdir(mode=0o755)
        folders.append(folder)
    memory = memory_mb << 20
    head = {"num_cpus": cpus, "memory": memory, "env_vars": {DATA_ENV: str(folders[0])}, "include_dashboard": False}
    cluster = Cluster(initialize_head=True, head_node_args=head)
    for folder in folders[1:]:
        cluster.add_node(num_cpus=cpus, memory=memory, env_vars={DATA_ENV: str(folder)})
    ray.init(address=cluster.address, log_to_driver=False, configure_logging=False)
    cluster.wait_for_nodes()
    return cluster


def timed_batch(executor, script: str, task, runs: int, concurrency: int) -> float:
    """Runs per second of `runs` runs, `concurrency` at a time; every run must succeed."""
    start = time.perf_counter()
    results = executor.run_many([script] * runs, task, max_workers=concurrency)
    elapsed = time.perf_counter() - start
    failed = [r for r in results if not r.ok]
    for result in results:
        executor.discard(result)
    if failed:
        raise SystemExit(f"a benchmark run failed under {executor.name}: {failed[0].stderr[-2000:]}")
    return runs / elapsed


def measure(executors: dict, task, args: argparse.Namespace) -> list[dict]:
    """One row per (script, concurrency, executor): its runs/s in every round."""
    cases = [(s, c, e) for s in SCRIPTS for c in args.concurrency for e in executors]
    for script, concurrency, name in cases:  # warm: workers up, data on the nodes, page cache
        timed_batch(executors[name](concurrency), SCRIPTS[script], task, concurrency, concurrency)
    rates: dict[tuple, list[float]] = {case: [] for case in cases}
    for round_ in range(args.rounds):
        shift = round_ % len(cases)
        for case in cases[shift:] + cases[:shift]:
            script, concurrency, name = case
            rates[case].append(timed_batch(executors[name](concurrency), SCRIPTS[script], task, args.runs,
                                           concurrency))
    return [{"script": s, "concurrency": c, "executor": e, "runs": args.runs, "runs_per_s": [round(r, 3) for r in v]}
            for (s, c, e), v in rates.items()]


def table_of(rows: list[dict], concurrency: tuple[int, ...]) -> list[list]:
    median = {(r["script"], r["concurrency"], r["executor"]): statistics.median(r["runs_per_s"]) for r in rows}
    out = []
    for script in SCRIPTS:
        for c in concurrency:
            local, ray = median[(script, c, "local")], median[(script, c, "ray")]
            out.append([script, c, round(local, 2), round(ray, 2), round(ray / local, 2)])
    return out


def meta(argv: list[str]) -> dict:
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    return {
        "command": " ".join(["python", "benchmarks/ray_exec.py", *argv]),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "commit": commit or "unknown",
        "machine": f"{platform.platform()}, {os.cpu_count()} CPUs, Python {platform.python_version()}",
    }


def run(args: argparse.Namespace, argv: list[str]) -> dict:
    import ray

    from mleforge.sandbox.local import LocalExecutor
    from mleforge.sandbox.ray_executor import RayExecutor
    from mleforge.sandbox.workspace import remove_tree
    from mleforge.tasks.preparation import prepare
    from mleforge.tasks.registry import TaskRegistry

    task = TaskRegistry(mlebench=False).get(args.task)
    prepare(task)
    if args.cpus_per_node is None:  # the cluster holds the largest concurrency's runs at once
        args.cpus_per_node = -(-max(args.concurrency) * task.spec.limits.cpus // args.nodes)
    scratch = Path(tempfile.mkdtemp(prefix="mleforge-bench-ray-"))
    scratch.chmod(0o755)
    # Ray's memory resource for as many of the task's runs as the node's CPUs hold.
    memory_mb = max(1, args.cpus_per_node // task.spec.limits.cpus) * task.spec.limits.memory_mb
    cluster = start_cluster(args.nodes, args.cpus_per_node, memory_mb, scratch)
    local = LocalExecutor(args.isolation, base_dir=scratch / "ws")
    rays = {c: RayExecutor(isolation=args.isolation, base_dir=scratch / "ws", max_concurrent=c)
            for c in args.concurrency}
    try:
        rows = measure({"local": lambda c: local, "ray": rays.__getitem__}, task, args)
        nodes: dict[str, dict[str, int]] = {}
        for executor in rays.values():
            for node, counts in executor.node_stats().items():
                mine = nodes.setdefault(node, {"runs": 0, "data_shipped": 0})
                mine["runs"] += counts["runs"]
                mine["data_shipped"] += counts["data_shipped"]
        isolation = local.isolation
    finally:
        local.close()
        for executor in rays.values():
            executor.close()
        ray.shutdown()
        cluster.shutdown()
        remove_tree(scratch)
    title = (f"runs per second on {task.id} ({isolation}), {args.runs} runs per batch, median of {args.rounds} "
             f"rounds; Ray: {args.nodes} local nodes x {args.cpus_per_node} logical CPUs on this machine")
    return {
        "benchmark": "ray_exec", "meta": meta(argv),
        "table": {"title": title, "columns": COLUMNS, "rows": table_of(rows, args.concurrency)},
        "task": task.id, "isolation": isolation, "rounds": rows,
        # Per node: runs served, and how many fetched the task data (at most one per node: its cache).
        "nodes": nodes, "executors": len(rays),
        "cluster": {"nodes": args.nodes, "cpus_per_node": args.cpus_per_node, "memory_mb_per_node": memory_mb},
    }


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", default="titanic")
    parser.add_argument("--runs", type=int, default=12, help="runs per timed batch")
    parser.add_argument("--concurrency", type=positive_counts, default=(1, 2, 4),
                        help="concurrent runs, comma-separated (default 1,2,4)")
    parser.add_argument("--rounds", type=int, default=2, help="timed batches per (script, concurrency, executor)")
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--cpus-per-node", type=int, help="logical CPUs of each node (default: the largest "
                        "concurrency's runs fit at once)")
    parser.add_argument("--isolation", default="auto", choices=("auto", "bwrap", "none"))
    parser.add_argument("--out", type=Path, default=Path("bench-out/ray_exec.json"))
    args = parser.parse_args(argv)
    for name in ("runs", "rounds", "nodes", "cpus_per_node"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1; got {getattr(args, name)}")
    from mleforge.errors import MleforgeError

    try:
        result = run(args, argv)
    except MleforgeError as exc:
        raise SystemExit(f"error: {exc}") from None
    from rich.console import Console
    from rich.table import Table

    table = Table(title=result["table"]["title"])
    for column in COLUMNS:
        table.add_column(column)
    for row in result["table"]["rows"]:
        table.add_row(*(str(v) for v in row))
    Console().print(table)
    print("per node (runs, of which fetched the task data):",
          {node[:12]: (n["runs"], n["data_shipped"]) for node, n in result["nodes"].items()})
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
