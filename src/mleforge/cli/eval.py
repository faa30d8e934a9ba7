"""`mleforge eval` (a policy on tasks x seeds, MLE-bench style) and `mleforge report` (of such runs)."""

from __future__ import annotations

import argparse
from pathlib import Path

from mleforge import config as tree
from mleforge.cli.engine_options import add_engine_arguments
from mleforge.cli.options import add_config_file, common, task_registry
from mleforge.cli.output import err_console, print_json, print_table
from mleforge.cli.stepwise import (
    add_stepwise_arguments,
    cmd_eval_compare,
    cmd_eval_stepwise,
    eval_configs,
)
from mleforge.eval.config import EvalConfig


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("eval", parents=[common()],
                       help="evaluate a policy on tasks x seeds like MLE-bench (resumable); writes aggregate.json")
    add_config_file(p, "an EvalConfig YAML file (with --stepwise also StepwiseStatesConfig's keys); flags over it")
    tree.add_arguments(p, EvalConfig)  # --policy, --tasks, --seeds, --time-limit, --trained-on, ...
    p.add_argument("--threads", type=int, help="torch threads for local models")
    add_engine_arguments(p)  # --engine, --quantization: how a local model generates
    p.add_argument("--out", help="evaluation folder (default runs/eval/<policy>; resumed if present)")
    p.add_argument("--fresh", action="store_true", help="delete the evaluation folder first instead of resuming")
    p.add_argument("--stepwise", action="store_true",
                   help="step-wise evaluation instead: one completion per fixed, seeded expert state (ML-Agent's unit)")
    p.add_argument("--compare", nargs=2, metavar=("POLICY_A", "POLICY_B"),
                   help="with --stepwise: evaluate two policies on the same states and seeds (into OUT/a, OUT/b) "
                        "and compare them paired (OUT/comparison.json)")
    add_stepwise_arguments(p)
    p.set_defaults(func=cmd_eval)
    compare = p.add_subparsers(dest="eval_command", metavar="{compare}",
                               help="`mleforge eval compare A B`: compare two step-wise results, paired")
    c = compare.add_parser("compare", parents=[common()],
                           help="B − A of two step-wise results on the same states and seeds (one result: its "
                                "null control, its seeds split in halves)")
    c.add_argument("results", nargs="+", metavar="RESULT",
                   help="stepwise.json files, folders `mleforge eval --stepwise` wrote, or a training run's "
                        "stepwise/<label>.json (A, then B)")
    c.add_argument("--labels", help="comma-separated names of A and B in the table (default: the paths)")
    c.add_argument("--other-seeds", action="store_true",
                   help="pair the same states at other sampling seeds: a null control of one policy against "
                        "itself (a comparison of two policies wants the same seeds)")
    c.add_argument("--out", help="write the comparison's JSON here")
    c.set_defaults(func=cmd_eval_compare)

    p = sub.add_parser("report", parents=[common()], help="Markdown + HTML report (tables, plots) of runs, side by side")
    p.add_argument("runs", nargs="+", help="run folders (e.g. what `mleforge eval` wrote)")
    p.add_argument("--out", help="output folder (default RUN/report for one run, runs/report for several)")
    p.add_argument("--labels", help="comma-separated names of the runs in the report (default: their policies)")
    p.add_argument("--title", help="report title")
    p.set_defaults(func=cmd_report)


def cmd_eval(args: argparse.Namespace) -> int:
    """Evaluate a policy on tasks x seeds (MLE-bench style), in parallel, resumable; writes aggregate.json."""
    if args.stepwise:
        return cmd_eval_stepwise(args)
    if args.compare:
        from mleforge.errors import ConfigError

        raise ConfigError("--compare A B evaluates two policies step-wise: add --stepwise (two result files "
                          "compare with `mleforge eval compare A B`)")
    from mleforge.eval.progress import RichGridProgress
    from mleforge.eval.runner import EvalGrid, safe_name
    from mleforge.eval.sections import pm

    config, _ = eval_configs(args)
    grid = EvalGrid(config, args.out or f"runs/eval/{safe_name(config.policy)}", registry=task_registry(args))
    warning = grid.contamination.warning
    if warning:
        err_console.print(f"[bold red]warning:[/] {warning}", highlight=False)
    with RichGridProgress(console=err_console, disable=args.json, title=config.policy) as progress:
        grid.listener = progress
        result = grid.run(fresh=args.fresh)
    agg = result.aggregate
    if args.json:
        print_json(agg)
        return 0
    m, runs = agg["metrics"], agg["runs"]
    print_table(f"{config.policy} on {len(agg['tasks'])} tasks x {len(agg['seeds'])} seeds "
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
