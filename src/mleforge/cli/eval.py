"""`mleforge eval` (a policy on tasks x seeds, MLE-bench style) and `mleforge report` (of such runs)."""

from __future__ import annotations

import argparse
from pathlib import Path

from mleforge.cli.options import (
    POLICY_HELP,
    add_feedback_option,
    add_generation_options,
    common,
    task_registry,
)
from mleforge.cli.output import err_console, print_json, print_table
from mleforge.cli.stepwise import add_stepwise_arguments, cmd_eval_stepwise


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("eval", parents=[common()],
                       help="evaluate a policy on tasks x seeds like MLE-bench (resumable); writes aggregate.json")
    p.add_argument("--policy", default="template", help=POLICY_HELP)
    p.add_argument("--tasks", default="lite", help="lite | all | id,id,... (mlebench:<id> for MLE-bench); default lite")
    p.add_argument("--seeds", type=int, default=3, help="seeds per task (default 3)")
    p.add_argument("--first-seed", type=int, default=0)
    p.add_argument("--steps", type=int, default=8, help="steps of search per run (default 8)")
    p.add_argument("--time-limit", type=float, help="wall-time limit of one run, in seconds")
    p.add_argument("--run-timeout", type=float, help="per-execution limit (default: the task's)")
    p.add_argument("--workers", type=int, help="runs at once (default: half the CPUs); generation is serialized")
    p.add_argument("--drafts", type=int, default=2, help="drafts before debugging/improving (default 2)")
    add_generation_options(p)
    add_feedback_option(p)
    p.add_argument("--trained-on", action="append",
                   help="a training run folder or record whose tasks the policy saw (repeatable; contamination guard)")
    p.add_argument("--out", help="evaluation folder (default runs/eval/<policy>; resumed if present)")
    p.add_argument("--fresh", action="store_true", help="delete the evaluation folder first instead of resuming")
    p.add_argument("--stepwise", action="store_true",
                   help="step-wise evaluation instead: one completion per fixed, seeded expert state (ML-Agent's unit)")
    add_stepwise_arguments(p)
    p.set_defaults(func=cmd_eval)

    p = sub.add_parser("report", parents=[common()], help="Markdown + HTML report (tables, plots) of runs, side by side")
    p.add_argument("runs", nargs="+", help="run folders (e.g. what `mleforge eval` wrote)")
    p.add_argument("--out", help="output folder (default RUN/report for one run, runs/report for several)")
    p.add_argument("--labels", help="comma-separated names of the runs in the report (default: their policies)")
    p.add_argument("--title", help="report title")
    p.set_defaults(func=cmd_report)


def cmd_eval(args: argparse.Namespace) -> int:
    from mleforge.cli.engine_options import engine_options

    """Evaluate a policy on tasks x seeds (MLE-bench style), in parallel, resumable; writes aggregate.json."""
    if args.stepwise:
        return cmd_eval_stepwise(args)
    from mleforge.eval.config import EvalConfig
    from mleforge.eval.progress import RichGridProgress
    from mleforge.eval.runner import EvalGrid, safe_name
    from mleforge.eval.sections import pm

    local = args.policy.partition(":")[0] in ("hf", "bundled")
    config = EvalConfig(
        policy=args.policy, tasks=args.tasks, seeds=args.seeds, first_seed=args.first_seed, steps=args.steps,
        time_limit_s=args.time_limit, run_timeout_s=args.run_timeout, workers=args.workers, drafts=args.drafts,
        max_new_tokens=args.max_new_tokens, temperature=args.temperature, executor=args.executor,
        isolation=args.isolation,
        policy_options={**({"num_threads": args.threads} if local and args.threads else {}),
                        **engine_options(args, args.policy)},
        train_runs=tuple(args.trained_on or ()), feedback=args.feedback,
    )
    grid = EvalGrid(config, args.out or f"runs/eval/{safe_name(args.policy)}", registry=task_registry(args))
    warning = grid.contamination.warning
    if warning:
        err_console.print(f"[bold red]warning:[/] {warning}", highlight=False)
    with RichGridProgress(console=err_console, disable=args.json, title=args.policy) as progress:
        grid.listener = progress
        result = grid.run(fresh=args.fresh)
    agg = result.aggregate
    if args.json:
        print_json(agg)
        return 0
    m, runs = agg["metrics"], agg["runs"]
    print_table(f"{args.policy} on {len(agg['tasks'])} tasks x {len(agg['seeds'])} seeds "
                f"({runs['finished']}/{runs['expected']} runs finished; {result.skipped} resumed)",
                ["metric", "mean ± SEM over seeds", "per seed"],
                [[name, pm(m[key], scale, digits), ", ".join(f"{v * scale:.{digits}f}" for v in
                                                              m[key]["per_seed"].values())]
                 for key, name, scale, digits in (
                     ("valid_submission", "valid submission %", 100.0, 1), ("above_median", "above median %", 100.0, 1),
                     ("any_medal", "any medal %", 100.0, 1), ("gold_medal", "gold %", 100.0, 1),
                     ("silver_medal", "silver %", 100.0, 1), ("bronze_medal", "bronze %", 100.0, 1),
                     ("normalized_score", "normalized score", 1.0, 3),
                     ("steps_to_first_valid", "steps to first valid", 1.0, 2))])
    print_table("per task (Best / Avg of valid final scores)",
                ["task", "metric", "runs", "valid", "best", "avg", "gold", "silver", "bronze", "normalized"],
                [[t["task_id"], t["metric"], t["runs"], t["valid"], t["best"], t["avg"], t["gold"], t["silver"],
                  t["bronze"], t["mean_normalized_score"]] for t in agg["per_task"]])
    if runs["missing"]:
        print_table("runs that did not finish (left out of every number)", ["task", "seed", "reason", "error"],
                    [[x["task_id"], x["seed"], x["reason"], x["error"]] for x in runs["missing"]])
    if warning:
        err_console.print(f"[bold red]warning:[/] {warning}", highlight=False)
    err_console.print(f"aggregate: {result.eval_dir}/aggregate.json; report: mleforge report {result.eval_dir}",
                      highlight=False)
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    """Markdown + self-contained HTML report (tables, plots) of one or more runs, side by side."""
    from mleforge.eval.report import write_report

    out = args.out or (Path(args.runs[0]) / "report" if len(args.runs) == 1 else Path("runs/report"))
    labels = [x.strip() for x in args.labels.split(",")] if args.labels else None
    written = write_report(args.runs, out, labels=labels, title=args.title)
    if args.json:
        print_json(written.to_dict())
    else:
        err_console.print(f"wrote {written.markdown} ({len(written.figures)} figures beside it) "
                          f"and {written.html}", highlight=False)
    return 0
