"""The agent end to end: `mleforge run` per task and policy, and where an agent step's time goes.

    python benchmarks/agent.py --policies template --steps 3 --out agent.json
    python benchmarks/agent.py --policies bundled:qwen2.5-coder-0.5b --steps 3 --threads 2 \\
        --max-new-tokens 700 --out agent.json

For every policy, task (default: the lite subset) and seed this runs the real command,
`mleforge run --task T --policy P --steps N --seed S --run-dir DIR --json`, in a
subprocess, and reads back its result and its run directory's steps.jsonl. Reported per
policy: the valid-submission rate (runs whose best node is valid), steps to the first
valid submission, the normalized score (0 = sample submission, 1 = leaderboard best) of
the valid runs, medals; per step: the outcome of each attempt (format error, execution
error, invalid submission, valid), generation and execution seconds, completion tokens.

Resumable: a run directory that already holds the asked number of steps is read, not
run again, and an interrupted run resumes from its journal (`mleforge run` does that).
`--out` is updated after every policy, so policies can be measured one call at a time
and end up in one table: an entry per policy, beside the results convention's keys
(benchmarks/_record.py; an --out written before them gains them on the next call). `--budget-s` stops starting new runs of a policy after that
many seconds (what was not run is reported as missing and runs on the next call).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

import _policy_tables as policy_bench
from _record import print_tables, table
from mleforge.reward.components import CASES as OUTCOMES
from mleforge.tasks.preparation import prepare
from mleforge.tasks.registry import TaskRegistry


def safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)


def read_steps(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / "steps.jsonl"
    if not path.is_file():
        return []
    lines = []
    for text in path.read_text(encoding="utf-8").splitlines():
        try:
            lines.append(json.loads(text))
        except json.JSONDecodeError:  # a line cut by a kill: the journal holds the step
            continue
    return lines


def finished(run_dir: Path, steps: int) -> dict[str, Any] | None:
    """The saved result of a run that already did `steps` steps, else None."""
    path = run_dir / "result.json"
    if not path.is_file():
        return None
    result = json.loads(path.read_text())
    return result if result.get("steps") == steps else None


def run_one(policy: str, task_id: str, seed: int, steps: int, run_dir: Path, args: argparse.Namespace) -> dict:
    """One `mleforge run`, or its saved result; returns the result and what it cost."""
    saved = finished(run_dir, steps)
    if saved is not None:
        return {"result": saved, "resumed": True, "returncode": 0, "error": None}
    command = [sys.executable, "-m", "mleforge", "run", "--task", task_id, "--policy", policy,
               "--steps", str(steps), "--seed", str(seed), "--run-dir", str(run_dir), "--json",
               "--max-new-tokens", str(args.max_new_tokens), "--executor", args.executor]
    if args.threads and policy.startswith(("hf:", "bundled:")):
        command += ["--threads", str(args.threads)]
    if args.run_timeout:
        command += ["--run-timeout", str(args.run_timeout)]
    run_dir.mkdir(parents=True, exist_ok=True)
    with open(run_dir.parent / f"{run_dir.name}.log", "ab") as log:
        done = subprocess.run(command, stdout=subprocess.PIPE, stderr=log, check=False)
    try:
        result = json.loads(done.stdout)
    except json.JSONDecodeError:
        return {"result": None, "resumed": False, "returncode": done.returncode,
                "error": f"`mleforge run` exited {done.returncode} without a result; see {run_dir}.log"}
    return {"result": result, "resumed": False, "returncode": done.returncode, "error": None}


def mean(values: list[float]) -> float | None:
    return round(statistics.fmean(values), 4) if values else None


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per-policy figures over its finished runs (and all their steps)."""
    results = [r["result"] for r in runs if r["result"] is not None]
    reports = [x["report"] for x in results]
    valid = [rep for rep in reports if rep is not None and rep["valid_submission"]]
    steps = [s for r in runs for s in r["steps"]]
    outcome_counts = {k: sum(1 for s in steps if s["outcome"] == k) for k in OUTCOMES}
    generation = [s["latency_s"] for s in steps if s.get("latency_s") is not None]
    execution = [s["wall_s"] for s in steps if s.get("wall_s") is not None]
    tokens = [s["tokens"] for s in steps if s.get("tokens") is not None]
    return {
        "runs": len(results),
        "failed_runs": sum(1 for r in runs if r["result"] is None),
        "valid_rate": round(len(valid) / len(results), 4) if results else None,
        "steps_to_first_valid": mean([x["steps_to_first_valid"] for x in results
                                      if x["steps_to_first_valid"] is not None]),
        "normalized_score_valid_runs": mean([rep["normalized_score"] for rep in valid]),
        "any_medal_rate": round(sum(rep["any_medal"] for rep in valid) / len(results), 4) if results else None,
        "steps": len(steps),
        "step_outcomes": outcome_counts,
        "step_valid_rate": round(outcome_counts["valid"] / len(steps), 4) if steps else None,
        "generation_s_per_step": mean(generation),
        "execution_s_per_step": mean(execution),
        "completion_tokens_per_step": mean(tokens),
        "tokens_per_generation_s": round(sum(tokens) / sum(generation), 2) if generation and sum(generation) else None,
        "wall_s_per_run": mean([x["wall_s"] for x in results]),
    }


def evaluate(policy: str, steps: int, budget_s: float, tasks: list[str], args: argparse.Namespace,
             progress: Progress) -> dict[str, Any]:
    root = Path(args.root) / safe(policy)
    jobs = [(task_id, seed) for seed in range(args.seeds) for task_id in tasks]
    bar = progress.add_task(policy, total=len(jobs))
    started = time.monotonic()
    runs, missing = [], []
    for task_id, seed in jobs:
        run_dir = root / f"{safe(task_id)}-seed{seed}"
        if budget_s and time.monotonic() - started > budget_s and finished(run_dir, steps) is None:
            missing.append({"task_id": task_id, "seed": seed})
            progress.advance(bar)
            continue
        progress.update(bar, description=f"{policy}: {task_id} seed {seed}")
        one = run_one(policy, task_id, seed, steps, run_dir, args)
        one.update(task_id=task_id, seed=seed, run_dir=str(run_dir), steps=read_steps(run_dir))
        runs.append(one)
        progress.advance(bar)
    progress.update(bar, description=policy)
    per_task = []
    for task_id in tasks:
        mine = [r for r in runs if r["task_id"] == task_id]
        row = summarize(mine)
        scores = [r["result"]["report"]["score"] for r in mine
                  if r["result"] and r["result"]["report"] and r["result"]["report"]["valid_submission"]]
        row.update(task_id=task_id, best_score=max(scores) if scores else None)
        per_task.append(row)
    return {
        "policy": policy, "steps": steps, "seeds": args.seeds, "tasks": tasks, "root": str(root),
        "wall_s": round(time.monotonic() - started, 1), "ran_now": sum(not r["resumed"] for r in runs if r["result"]),
        "missing": missing, "errors": [{"task_id": r["task_id"], "seed": r["seed"], "error": r["error"]}
                                       for r in runs if r["error"]],
        "summary": summarize(runs), "per_task": per_task,
        "runs": [{k: r[k] for k in ("task_id", "seed", "run_dir", "resumed", "returncode", "error")}
                 | {"result": r["result"]} for r in runs],
    }


def fmt(value: Any, digits: int = 2, scale: float = 1.0, suffix: str = "") -> str:
    return "-" if value is None else f"{value * scale:.{digits}f}{suffix}"


def tables(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The summary per policy, then the per-task table."""
    rows = []
    for r in results.values():
        s = r["summary"]
        o = s["step_outcomes"]
        n = s["steps"] or 1
        rows.append([
            r["policy"], r["steps"], f"{s['runs']}" + (f" (+{len(r['missing'])} missing)" if r["missing"] else ""),
            fmt(s["valid_rate"], 0, 100, "%"), fmt(s["steps_to_first_valid"]), fmt(s["normalized_score_valid_runs"], 3),
            fmt(s["any_medal_rate"], 0, 100, "%"), fmt(s["step_valid_rate"], 0, 100, "%"),
            f"{o['format_error'] / n:.0%}", f"{(o['execution_error'] + o['timeout']) / n:.0%}",
            f"{o['invalid_submission'] / n:.0%}", fmt(s["generation_s_per_step"], 1), fmt(s["execution_s_per_step"], 1),
            fmt(s["completion_tokens_per_step"], 0),
            # The template writes its scripts without a model: its tokens are estimates, no rate.
            "-" if r["policy"] == "template" else fmt(s["tokens_per_generation_s"], 1), fmt(s["wall_s_per_run"], 0),
        ])
    summary = table("agent: `mleforge run` per task (runs = tasks x seeds)",
                    ["policy", "steps", "runs", "valid runs", "steps to 1st valid", "normalized (valid)", "medal",
                     "valid steps", "fmt err", "exec err", "invalid", "gen s/step", "exec s/step", "tokens/step",
                     "tok/s", "s/run"], rows)

    def cell(t: dict[str, Any]) -> str:
        return (f"{round(t['valid_rate'] * t['runs'])}/{t['runs']}  best {fmt(t['best_score'], 4)}"
                f"  norm {fmt(t['normalized_score_valid_runs'], 3)}")

    per_task = "per task: valid runs, best score, normalized score of the valid runs"
    return [summary, policy_bench.per_task_table(per_task, results, cell)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    policy_bench.add_shared_flags(parser, "agent")
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--executor", default="local", help="sandbox backend for the runs (default local)")
    args = parser.parse_args()
    registry = TaskRegistry()
    tasks = [t.id for t in registry.select(args.tasks)]
    for task_id in tasks:  # once here (a no-op when intact), not raced by the runs
        prepare(registry.get(task_id))
    policies = policy_bench.policies_of(args.policies)
    steps = policy_bench.per_policy(args.steps, len(policies), int)
    budgets = policy_bench.per_policy(args.budget_s, len(policies), float)
    results = policy_bench.load_results(args.out)
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()) as progress:
        for policy, n, budget in zip(policies, steps, budgets):
            results[policy] = evaluate(policy, n, budget, tasks, args, progress)
            record = policy_bench.write_results(args.out, "agent", results, tables(results))
    print_tables(record)


if __name__ == "__main__":
    main()
