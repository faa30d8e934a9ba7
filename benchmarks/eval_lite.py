"""MLE-bench-style evaluation of policies on the lite subset of the built-in suite.

    python benchmarks/eval_lite.py --policies template --seeds 3 --steps 3 --out eval_lite.json
    python benchmarks/eval_lite.py --policies bundled:qwen2.5-coder-0.5b --seeds 1 --steps 1 \\
        --budget-s 2700 --threads 1 --max-new-tokens 700 --out eval_lite.json

Each policy gets an evaluation folder under `--root` (resumable: run the same command
again to continue). `--seeds`, `--steps` and `--budget-s` take one value for every policy or
one per policy, comma-separated. A budget stops the grid (seed-major: whole seeds first)
once that many seconds have passed: runs not finished by then are reported as missing, and
resume on the next call. `--out` is updated per policy, so policies can be run one at a time
and end up in one table: an entry per policy, beside the results convention's keys
(benchmarks/_record.py; an --out written before them gains them on the next call).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import _policy_tables as policy_bench
from _record import print_tables, table
from mleforge.eval.config import EvalConfig
from mleforge.eval.progress import RichGridProgress
from mleforge.eval.runner import EvalGrid, safe_name


class Budget(RichGridProgress):
    """Progress that also stops the grid once `budget_s` seconds have passed."""

    def __init__(self, grid: EvalGrid, budget_s: float, **kwargs: Any):
        super().__init__(**kwargs)
        self.grid, self.budget_s, self.started = grid, budget_s, time.monotonic()

    def _check(self) -> None:
        if self.budget_s and time.monotonic() - self.started > self.budget_s:
            self.grid.stop()

    def step(self, task_id: str, seed: int, outcome: Any) -> None:
        super().step(task_id, seed, outcome)
        self._check()

    def done(self, task_id: str, seed: int, record: Any) -> None:
        super().done(task_id, seed, record)
        self._check()


def evaluate(policy: str, seeds: int, steps: int, budget_s: float, args: argparse.Namespace) -> dict[str, Any]:
    options = {"num_threads": args.threads} if args.threads and policy.startswith(("hf:", "bundled:")) else {}
    config = EvalConfig(policy=policy, tasks=args.tasks, seeds=seeds, steps=steps, workers=args.workers,
                        run_timeout_s=args.run_timeout, max_new_tokens=args.max_new_tokens,
                        policy_options=options)
    grid = EvalGrid(config, Path(args.root) / safe_name(policy))
    started = time.monotonic()
    with Budget(grid, budget_s, title=policy) as progress:
        grid.listener = progress
        result = grid.run()
    agg = result.aggregate
    return {
        "policy": policy, "eval_dir": result.eval_dir, "seeds": seeds, "steps": steps, "budget_s": budget_s,
        "wall_s": round(time.monotonic() - started, 1), "ran_now": result.ran, "resumed": result.skipped,
        "interrupted": agg["interrupted"], "runs": {k: v for k, v in agg["runs"].items() if k != "missing"},
        "missing": agg["runs"]["missing"], "metrics": agg["metrics"], "per_task": agg["per_task"],
        "usage": agg["usage"],
    }


def pm(metric: dict[str, Any], scale: float = 100.0, digits: int = 1) -> str:
    if metric["mean"] is None:
        return "-"
    sem = "" if metric["sem"] is None else f" ± {metric['sem'] * scale:.{digits}f}"
    return f"{metric['mean'] * scale:.{digits}f}{sem}"


def tables(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The metrics per policy, then the per-task table."""
    rows = []
    for r in results.values():
        m, finished = r["metrics"], r["runs"]["finished"]
        rows.append([r["policy"], f"{r['seeds']} x {r['steps']}", f"{finished}/{r['runs']['expected']}",
                     pm(m["valid_submission"]), pm(m["above_median"]), pm(m["any_medal"]), pm(m["gold_medal"]),
                     pm(m["normalized_score"], 1.0, 3), pm(m["steps_to_first_valid"], 1.0, 2),
                     f"{r['usage']['wall_s'] / finished:.0f}" if finished else "-"])
    metrics = table("lite subset: % of runs (mean ± SEM over seeds)",
                    ["policy", "seeds x steps", "runs", "valid %", "above median %", "any medal %", "gold %",
                     "normalized", "steps to 1st valid", "s / run"], rows)

    def cell(t: dict[str, Any]) -> str:
        if t["best"] is None:
            return f"no valid ({t['valid']}/{t['runs']})"
        return f"{t['best']:.4g} / {t['avg']:.4g} ({t['valid']}/{t['runs']})"

    per_task = "per task: Best / Avg of the final scores (valid runs / finished runs)"
    return [metrics, policy_bench.per_task_table(per_task, results, cell)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    policy_bench.add_shared_flags(parser, "eval_lite")
    parser.add_argument("--seeds", default="3", help="per policy, comma-separated, or one for all")
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args()
    policies = policy_bench.policies_of(args.policies)
    seeds = policy_bench.per_policy(args.seeds, len(policies), int)
    steps = policy_bench.per_policy(args.steps, len(policies), int)
    budgets = policy_bench.per_policy(args.budget_s, len(policies), float)
    results = policy_bench.load_results(args.out)
    for policy, k, n, budget in zip(policies, seeds, steps, budgets):
        results[policy] = evaluate(policy, k, n, budget, args)
        record = policy_bench.write_results(args.out, "eval_lite", results, tables(results))
    print_tables(record)


if __name__ == "__main__":
    main()
