"""Per-run overhead, throughput and leaks of the executors, measured in one run.

    python benchmarks/sandbox.py [--task titanic] [--repeats 10] [--workers 1,2,4] [--pool-runs 1000]
                                 [--bombs-only] [--latency-only] [--as-user nobody] [--out bench-out/sandbox.json]

1. Per-run time of an empty script and of a pandas + scikit-learn import script,
   as (a) bare `python script.py`, (b) the local executor unisolated, (c) the
   local executor under bwrap, (d) the warm pool, (e) a result-cache hit.
2. Throughput (runs per second) of the import script with 1, 2 and 4 concurrent
   runs (`--workers`; 1,4,16 on a 16-core machine), for the local executor and the warm pool.
3. `--pool-runs` runs through one warm pool (a mix of honest, crashing and
   process-leaving scripts), then: no process left, no workspace or temporary
   folder left, no descriptor leaked.

4. Submission bombs (tests/sandbox/bombs.py: 200 MB with 100k columns, a header
   of 100k duplicate names, one endless 200 MB line, too many rows, a wide
   header): each graded in a fresh process, whose wall time and peak RSS above
   its state before grading are recorded (`--bombs-only` runs just this part).

5. A run's start latency, the warm pool against a bwrap per run (the local
   executor), both isolated, as this user and, when this is root, as the
   unprivileged `--as-user` (default nobody; through setpriv, with its own HOME
   and data root; left out with the reason where that user cannot run this
   interpreter, e.g. below a 0700 /root): the whole `run` call of an empty and
   of a pandas + scikit-learn import script, interleaved (`--latency-only` runs
   just this part).

The targets: the pool's per-run time at least 10x below bare `python` with the
imports, and bwrap adding under 10% to a bare run. The data root is
$MLEFORGE_DATA (the task is prepared if needed). Writes JSON to --out (benchmarks/_record.py's
convention: its table the first part run, the others' in `tables`) and prints the tables.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _record import invocation, print_tables, table, write_result  # noqa: E402

SCRIPTS = {
    "empty": "pass\n",
    "pandas+sklearn": "import pandas, sklearn.ensemble\n",
}
LEAK_MIX = [
    "import pandas as pd\npd.read_csv('input/train.csv').head(3).to_csv('submission/submission.csv')",
    "import os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(60)\nprint('left a child')",
    "import tempfile\nopen('working/x', 'w').write('x' * 100000)\ntempfile.mkstemp()\n1 / 0",
    "import os\nos.kill(os.getpid(), 9)",
    "import threading, time\nthreading.Thread(target=time.sleep, args=(60,), daemon=True).start()",
]


def _bare_once(path: Path) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, str(path)], cwd=path.parent, check=True, capture_output=True)
    return time.perf_counter() - start


def _executor_once(executor, script: str, task) -> float:
    start = time.perf_counter()
    result = executor.run(script, task)
    elapsed = time.perf_counter() - start
    if not result.ok:
        raise SystemExit(f"benchmark script failed under {executor.name}: {result.stderr[-2000:]}")
    executor.discard(result)
    return elapsed


def _interleaved(backends: dict, repeats: int) -> dict[str, list[float]]:
    """Each repeat times every backend once, in a rotated order: the load of a busy
    machine drifts over minutes, and must not favour whoever ran at a quiet moment."""
    for measure in backends.values():
        measure()  # warm: the page cache, a pool's zygote, the cache's first (missing) run
    names = list(backends)
    times: dict[str, list[float]] = {name: [] for name in names}
    for repeat in range(repeats):
        for name in names[repeat % len(names):] + names[: repeat % len(names)]:
            times[name].append(backends[name]())
    return times


def _row(backend: str, script: str, times: list[float]) -> dict:
    return {
        "backend": backend, "script": script, "runs": len(times),
        "median_s": round(statistics.median(times), 4), "min_s": round(min(times), 4),
        "p90_s": round(sorted(times)[int(0.9 * (len(times) - 1))], 4),
    }


def _throughput(label: str, executor, task, workers: int, runs: int) -> dict:
    scripts = [SCRIPTS["pandas+sklearn"]] * runs
    start = time.perf_counter()
    results = executor.run_many(scripts, task, max_workers=workers)
    elapsed = time.perf_counter() - start
    for result in results:
        executor.discard(result)
    return {
        "backend": label, "workers": workers, "runs": runs, "ok": sum(r.ok for r in results),
        "seconds": round(elapsed, 3), "runs_per_s": round(runs / elapsed, 3),
    }


def _descendants(pid: int) -> list[int]:
    tree: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    tree.setdefault(int(f.read().rsplit(")", 1)[1].split()[1]), []).append(int(entry))
            except (OSError, IndexError, ValueError):
                continue
    found, stack = [], [pid]
    while stack:
        for child in tree.get(stack.pop(), []):
            found.append(child)
            stack.append(child)
    return found


def _leak_check(pool, task, runs: int) -> dict:
    from mleforge.sandbox import RunLimits
    from mleforge.sandbox.process import marked_processes

    limits = RunLimits.of(None, task.spec.limits, timeout_s=30)
    pool.run("pass", task, limits)
    fds = sorted(os.listdir("/proc/self/fd"))
    temp = {p for p in os.listdir(tempfile.gettempdir()) if p.startswith("mleforge")}
    scripts = [LEAK_MIX[i % len(LEAK_MIX)] for i in range(runs)]
    start = time.perf_counter()
    results = pool.run_many(scripts, task, limits, max_workers=2)
    elapsed = time.perf_counter() - start
    for result in results:
        pool.discard(result)
    (zygote,) = [z for z in pool.zygotes if z["key"][-3] == limits.cpus]  # key: (..., cpus, isolation, masks)
    expected = 2 if pool.isolation == "bwrap" else 0  # bwrap's monitor and init, then the zygote
    for _ in range(100):
        if len(_descendants(zygote["pid"])) == expected:
            break
        time.sleep(0.05)
    left_processes = sum(len(marked_processes(r.run_id.encode())) for r in results)
    left_files = sorted(p.name for p in pool.workspaces_dir.iterdir() if p.name not in (".lock", "submissions", "zygotes"))
    left_files += [f"submissions/{p.name}" for p in (pool.workspaces_dir / "submissions").iterdir()]
    new_temp = sorted({p for p in os.listdir(tempfile.gettempdir()) if p.startswith("mleforge")} - temp)
    return {
        "runs": runs, "seconds": round(elapsed, 2), "runs_per_s": round(runs / elapsed, 2),
        "ok": sum(r.ok for r in results), "killed_by_signal": sum(r.killed_by == "signal" for r in results),
        "failed": sum(r.returncode not in (0, None) for r in results),
        "processes_left": left_processes,
        "zygote_descendants": len(_descendants(zygote["pid"])) - expected,
        "workspace_entries_left": left_files, "temp_entries_left": new_temp,
        "fds_leaked": len(set(os.listdir("/proc/self/fd")) - set(fds)),
    }


# Grades one file in a fresh process: {"valid", "reason", "wall_s", "rss_before_mb", "peak_rss_mb"}.
_GRADE_ONE = """
import json, resource, sys, time
from mleforge.grading.grader import grade, load_answers, submission_bounds
from mleforge.tasks.registry import TaskRegistry
task = TaskRegistry(mlebench=False).get(sys.argv[1])
load_answers(task); submission_bounds(task)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
start = time.perf_counter()
report = grade(task, sys.argv[2])
wall = time.perf_counter() - start
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"valid": report.valid_submission, "reason": report.invalid_reason, "wall_s": round(wall, 4),
                  "rss_before_mb": round(before / 1024, 1), "peak_rss_mb": round(peak / 1024, 1),
                  "grading_rss_mb": round((peak - before) / 1024, 1)}))
"""


def _bomb_grading(task, scratch: Path) -> list[dict]:
    """Each bomb (and the honest sample submission) graded in a fresh process."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the tests package
    from tests.sandbox.bombs import BOMBS, write_bomb

    rows = []
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(Path(__file__).resolve().parent.parent / "src"),
                                                                   os.environ.get("PYTHONPATH")) if p)}
    for kind in ("honest", *BOMBS):
        path = scratch / f"bomb-{kind}" / "submission.csv"
        path.parent.mkdir()
        if kind == "honest":
            path.write_bytes(task.sample_submission_path.read_bytes())
        else:
            write_bomb(kind, path, task.spec.submission.columns)
        out = subprocess.run([sys.executable, "-c", _GRADE_ONE, task.id, str(path)], capture_output=True,
                             text=True, env=env, check=True).stdout
        rows.append({"bomb": kind, "bytes": path.stat().st_size, **json.loads(out.splitlines()[-1])})
        path.unlink()
    return rows


# Times runs through a local bwrap and a warm pool, both isolated, as whoever runs it; prints JSON.
_LATENCY = """
import json, os, shutil, statistics, sys, tempfile, time
from mleforge.sandbox.local import LocalExecutor
from mleforge.sandbox.pool.executor import PoolExecutor
from mleforge.tasks.preparation import prepare
from mleforge.tasks.registry import TaskRegistry
task = TaskRegistry(mlebench=False).get(sys.argv[1])
prepare(task)
repeats, scripts = int(sys.argv[2]), json.loads(sys.argv[3])
base = tempfile.mkdtemp(prefix="mleforge-bench-")
rows, isolation = [], {}
try:
    with LocalExecutor("bwrap", base_dir=base) as local, PoolExecutor("bwrap", base_dir=base) as pool:
        backends = {"local bwrap": local, "pool bwrap": pool}
        for name, executor in backends.items():
            isolation[name] = executor.resolve_isolation().describe()
            executor.discard(executor.run("pass", task))  # the probe, the zygote, the page cache
        for script_name, script in scripts.items():
            times = {name: [] for name in backends}
            for repeat in range(repeats):
                for name in (list(backends) if repeat % 2 == 0 else list(backends)[::-1]):
                    start = time.perf_counter()
                    result = backends[name].run(script, task)
                    times[name].append(time.perf_counter() - start)
                    if not result.ok:
                        raise SystemExit(f"{name}: {script_name} failed: {result.stderr[-2000:]}")
                    backends[name].discard(result)
            for name, values in times.items():
                rows.append({"backend": name, "script": script_name, "runs": len(values),
                             "median_s": round(statistics.median(values), 4), "min_s": round(min(values), 4)})
finally:
    shutil.rmtree(base, ignore_errors=True)
print(json.dumps({"uid": os.geteuid(), "isolation": isolation, "rows": rows}))
"""


# Part 5's runs, each of the two scripts `--repeats` times through both executors: far
# below this unless a run is stuck.
LATENCY_TIMEOUT_S = 1800


def _unprivileged_user(name: str | None, as_root: bool):
    """Part 5's `--as-user`: its password entry when this is root and a name is given
    (None otherwise: part 5 then runs as this user only). Checked before anything runs."""
    import pwd

    from mleforge.errors import ConfigError

    if not as_root or not name:
        return None
    try:
        return pwd.getpwnam(name)
    except KeyError:
        raise ConfigError(
            f"--as-user {name!r}: there is no such user on this machine; name an existing unprivileged user "
            "(e.g. --as-user nobody), or pass --as-user '' to leave the unprivileged latency runs out"
        ) from None


def _start_latency(task, repeats: int, user) -> list[dict]:
    """Part 5: the rows of `_LATENCY` as this user and, from root, as `user` (a password
    entry from _unprivileged_user, or None)."""
    import shutil

    src = str(Path(__file__).resolve().parent.parent / "src")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (src, os.environ.get("PYTHONPATH")) if p)}
    args = [task.id, str(repeats), json.dumps(SCRIPTS)]
    runs = [("this user", [sys.executable, "-c", _LATENCY, *args], env, None)]
    if user is not None:
        as_user = user.pw_name
        home = Path(tempfile.mkdtemp(prefix="mleforge-bench-user-"))
        os.chmod(home, 0o700)
        os.chown(home, user.pw_uid, user.pw_gid)
        user_env = {"PATH": os.environ.get("PATH", os.defpath), "HOME": str(home), "TMPDIR": str(home),
                    # This process's import path too: packages installed beside the interpreter's
                    # (pip --target, as on a GPU machine) are the user's as well.
                    "MLEFORGE_DATA": str(home / "data"), "PYTHONPATH": env["PYTHONPATH"], "LANG": "C.UTF-8",
                    **{k: os.environ[k] for k in ("OMP_NUM_THREADS", "MLEFORGE_BWRAP") if k in os.environ}}
        setpriv = ["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--clear-groups", "--"]
        runs.append((as_user, [*setpriv, sys.executable, "-c", _LATENCY, *args], user_env, home))
    rows = []
    for who, command, run_env, home in runs:
        try:
            done = subprocess.run(command, capture_output=True, text=True, env=run_env, timeout=LATENCY_TIMEOUT_S)
        except subprocess.TimeoutExpired as exc:
            # Recorded like a failed part: the other parts' hours of figures are kept.
            tail = exc.stderr or exc.stdout or ""
            tail = tail.decode(errors="replace") if isinstance(tail, bytes) else tail
            rows.append({"who": who, "error": (
                f"did not finish in {LATENCY_TIMEOUT_S} s (killed): a run stuck in the sandbox, or a machine "
                f"too loaded for --repeats {repeats}; rerun with --latency-only and fewer --repeats, and look "
                f"for leftover sandbox processes. Its last output: {tail.strip()[-400:] or '(none)'}")})
            continue
        finally:
            if home is not None:
                shutil.rmtree(home, ignore_errors=True)
        if done.returncode != 0:
            rows.append({"who": who, "error": (done.stderr or done.stdout).strip()[-600:]})
            continue
        measured = json.loads(done.stdout.splitlines()[-1])
        for row in measured["rows"]:
            rows.append({"who": who, "uid": measured["uid"], **row,
                         "isolation": measured["isolation"][row["backend"]]})
    return rows


def _latency_table(rows: list[dict]) -> dict:
    return table("a run's start latency, isolated: warm pool against a bwrap per run (the whole call)",
                 ["who", "uid", "backend", "script", "median s", "min s", "bwrap"],
                 [[row["who"], None, None, None, None, None, f"not measured: {row['error'][-200:]}"] if "error" in row
                  else [row["who"], row["uid"], row["backend"], row["script"], row["median_s"], row["min_s"],
                        row["isolation"].split(" (")[0]]  # the JSON has the path too
                  for row in rows])


def _bombs_table(bombs: list[dict]) -> dict:
    return table("submission bombs graded in the parent (fresh process each)",
                 ["bomb", "MB", "valid", "wall s", "grading RSS MB", "peak RSS MB", "reason"],
                 [[row["bomb"], round(row["bytes"] / 2**20, 1), row["valid"], row["wall_s"], row["grading_rss_mb"],
                   row["peak_rss_mb"], (row["reason"] or "")[:60]] for row in bombs])


def _overhead_table(task_id: str, repeats: int, overhead: list[dict]) -> dict:
    return table(f"per-run time on {task_id} (median of {repeats}, interleaved; the run's whole call)",
                 ["backend", "script", "median s", "min s", "p90 s"],
                 [[row["backend"], row["script"], row["median_s"], row["min_s"], row["p90_s"]] for row in overhead])


def _throughput_table(runs: int, throughput: list[dict]) -> dict:
    return table(f"throughput: {runs} pandas+sklearn runs", ["backend", "workers", "seconds", "runs/s", "ok"],
                 [[row["backend"], row["workers"], row["seconds"], row["runs_per_s"], f"{row['ok']}/{row['runs']}"]
                  for row in throughput])


def _targets_table(targets: dict, leaks: dict | None) -> dict:
    rows = [[key, value] for key, value in targets.items()]
    rows += [[f"pool leak check: {key}", ", ".join(value) or "none" if isinstance(value, list) else value]
             for key, value in (leaks or {}).items()]
    return table("targets", ["measure", "value"], rows)


def _write(args: argparse.Namespace, tables: list[dict], **data) -> int:
    """The record (its first table the results page's, the rest as `tables`) to --out, printed."""
    first, *more = tables
    record = write_result(args.out, "sandbox", first, argv=args.argv, tables=more, **data)
    print_tables(record)
    print(f"written: {args.out}")
    return 0


def _worker_counts(text: str) -> tuple[int, ...]:
    """`--workers 1,4,16`: positive integers, in the order given."""
    try:
        counts = tuple(int(part) for part in text.split(","))
    except ValueError:
        counts = ()
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError(f"expected comma-separated positive integers, as in 1,4,16; got {text!r}")
    return counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", default="titanic")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--throughput-runs", type=int, default=8)
    parser.add_argument("--workers", type=_worker_counts, default=(1, 2, 4),
                        help="concurrent runs of the throughput part, comma-separated (default 1,2,4)")
    parser.add_argument("--pool-runs", type=int, default=1000, help="runs of the pool leak check (0: skip)")
    parser.add_argument("--bombs-only", action="store_true", help="only the submission bombs (part 4)")
    parser.add_argument("--latency-only", action="store_true", help="only the start latency (part 5)")
    parser.add_argument("--as-user", default="nobody",
                        help="the unprivileged user of part 5 when run as root ('' to leave it out)")
    parser.add_argument("--out", type=Path, default=Path("bench-out/sandbox.json"))
    args = parser.parse_args(argv)
    args.argv = invocation(__file__, argv)  # the command the JSON's meta names
    from mleforge.errors import MleforgeError

    try:
        return _run(args)
    except MleforgeError as exc:
        raise SystemExit(f"error: {exc}") from None


def _run(args: argparse.Namespace) -> int:
    user = _unprivileged_user(args.as_user, os.geteuid() == 0)  # before the long parts, not after them

    from mleforge.sandbox.caching_executor import CachingExecutor
    from mleforge.sandbox.local import LocalExecutor
    from mleforge.sandbox.pool.executor import PoolExecutor
    from mleforge.sandbox.workspace import remove_tree
    from mleforge.tasks.preparation import prepare
    from mleforge.tasks.registry import TaskRegistry

    task = TaskRegistry(mlebench=False).get(args.task)
    prepare(task)
    if args.latency_only:
        latency = _start_latency(task, args.repeats, user)
        return _write(args, [_latency_table(latency)], task=task.id, start_latency=latency)
    scratch = Path(tempfile.mkdtemp(prefix="mleforge-bench-"))
    try:
        bombs = _bomb_grading(task, scratch)
    finally:
        remove_tree(scratch)
    if args.bombs_only:
        return _write(args, [_bombs_table(bombs)], task=task.id, submission_bombs=bombs)
    scratch = Path(tempfile.mkdtemp(prefix="mleforge-bench-"))
    local_none = LocalExecutor("none", base_dir=scratch / "ws")
    local_bwrap = LocalExecutor("auto", base_dir=scratch / "ws")
    pool = PoolExecutor("auto", base_dir=scratch / "ws")
    cached = CachingExecutor(PoolExecutor("auto", base_dir=scratch / "ws", preload=["json"]), scratch / "cache.sqlite")
    executors = [("local (none)", local_none), (f"local ({local_bwrap.isolation})", local_bwrap),
                 (f"pool ({pool.isolation})", pool)]
    overhead, throughput, leaks = [], [], None
    try:
        for name, script in SCRIPTS.items():
            bare_script = scratch / name.replace("+", "_") / "script.py"
            bare_script.parent.mkdir()
            bare_script.write_text(script)
            backends = {"(a) bare python": functools.partial(_bare_once, bare_script)}
            for (label, executor), letter in zip([*executors, ("cache hit", cached)], "bcde"):
                backends[f"({letter}) {label}"] = functools.partial(_executor_once, executor, script, task)
            for backend, times in _interleaved(backends, args.repeats).items():
                overhead.append(_row(backend, name, times))
        for label, executor in executors[1:]:
            for workers in args.workers:
                throughput.append(_throughput(label, executor, task, workers, args.throughput_runs))
        if args.pool_runs:
            leaks = _leak_check(pool, task, args.pool_runs)
    finally:
        for _, executor in executors:
            executor.close()
        cached.close()
        remove_tree(scratch)
    latency = _start_latency(task, args.repeats, user)

    def stat(backend_prefix: str, script: str, which: str = "median_s") -> float:
        return next(r[which] for r in overhead if r["backend"].startswith(backend_prefix) and r["script"] == script)

    heavy = "pandas+sklearn"
    a, b, c, d = (stat(x, heavy) for x in ("(a)", "(b)", "(c)", "(d)"))
    targets = {
        "pool_speedup_vs_bare": round(a / d, 1),
        "bwrap_vs_bare_pct": round(100 * (c / a - 1), 1),
        "bwrap_vs_local_unisolated_pct": round(100 * (c - b) / a, 1),
        # The least disturbed runs, for a machine others load as well:
        "pool_speedup_vs_bare_min": round(stat("(a)", heavy, "min_s") / stat("(d)", heavy, "min_s"), 1),
        "bwrap_vs_bare_pct_min": round(100 * (stat("(c)", heavy, "min_s") / stat("(a)", heavy, "min_s") - 1), 1),
    }
    targets["pool_10x_met"] = targets["pool_speedup_vs_bare"] >= 10
    targets["bwrap_under_10pct_met"] = targets["bwrap_vs_bare_pct"] < 10

    tables = [_overhead_table(task.id, args.repeats, overhead), _throughput_table(args.throughput_runs, throughput),
              _targets_table(targets, leaks), _bombs_table(bombs), _latency_table(latency)]
    return _write(args, tables, task=task.id, overhead=overhead, throughput=throughput, targets=targets,
                  pool_leaks=leaks, submission_bombs=bombs, start_latency=latency)


if __name__ == "__main__":
    sys.exit(main())
