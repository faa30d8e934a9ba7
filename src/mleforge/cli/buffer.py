"""`mleforge buffer show|export RUN_DIR`: a run's state buffer (the curriculum), read only."""

from __future__ import annotations

import argparse
from pathlib import Path

from mleforge.cli.options import (
    common,
)
from mleforge.cli.output import err_console, print_json, print_table


def register(sub: argparse._SubParsersAction) -> None:
    buffer = sub.add_parser("buffer", help="inspect and export a run's state buffer (curriculum)")
    bsub = buffer.add_subparsers(dest="buffer_command", required=True)
    p = bsub.add_parser("show", parents=[common()], help="sizes, top states by learnability potential, growth")
    p.add_argument("run_dir", help="a run directory (holding buffer.sqlite) or the .sqlite file")
    p.add_argument("--top", type=int, default=10, help="how many states to list by LP")
    p.add_argument("--steps", type=int, default=20, help="last steps of growth in the table (0: all)")
    p.set_defaults(func=cmd_buffer_show)
    p = bsub.add_parser("export", parents=[common()],
                        help="write the live states as jsonl, parquet, or verl's parquet (prompts rendered)")
    p.add_argument("run_dir", help="a run directory (holding buffer.sqlite) or the .sqlite file")
    p.add_argument("--format", choices=("jsonl", "parquet", "verl"), default="jsonl",
                   help="verl: RLHFDataset's columns (data_source, prompt, ability, reward_model, extra_info); "
                        "needs the run directory's config.yaml for its tasks and prompt settings")
    p.add_argument("--out", help="output file (default RUN_DIR/buffer_states.FORMAT)")
    p.set_defaults(func=cmd_buffer_export)


def _open_buffer(path: str):
    from mleforge.curriculum.buffer import StateBuffer

    return StateBuffer(path, create=False)


def cmd_buffer_show(args: argparse.Namespace) -> int:
    from mleforge.curriculum.summary import buffer_summary

    with _open_buffer(args.run_dir) as buffer:
        summary = buffer_summary(buffer, top=args.top)
    if args.json:
        print_json(summary)
        return 0
    print_table(
        f"state buffer {summary['path']} (sealed through step {summary['sealed_step']})",
        ["live states", "seeds", "rollouts", "evicted (kept)", "sealed steps"],
        [[summary["live_states"], summary["seeds"], summary["rollouts"], summary["evicted_kept"],
          summary["sealed_steps"]]],
    )
    print_table("states by task and stage", ["task", "stage", "states", "seeds", "rollouts"],
                [[r["task_id"], r["stage"], r["states"], r["seeds"], r["rollouts"]]
                 for r in summary["by_task_stage"]])
    print_table(f"top {len(summary['top'])} states by learnability potential",
                ["state (*seed)", "task", "stage", "LP", "p", "U", "H", "n", "s", "mean reward", "best"],
                [[r["state_id"][:10] + ("*" if r["is_seed"] else ""), r["task_id"], r["stage"], r["LP"], r["p"],
                  r["U"], r["H"], r["rollouts"], r["successes"], r["mean_reward"], r["best_score"]]
                 for r in summary["top"]])
    growth = summary["growth"][-args.steps:] if args.steps else summary["growth"]
    print_table(f"growth over steps (last {len(growth)})",
                ["step", "live", "new", "evicted", "rollouts", "mean reward", "success rate", "tied groups"],
                [[g["step"], g["live_states"], g["new_states"], g["evicted"], g["rollouts"], g["mean_reward"],
                  g["success_rate"], g["frac_zero_std_groups"]] for g in growth])
    return 0


def cmd_buffer_export(args: argparse.Namespace) -> int:
    from mleforge.curriculum.export import export_buffer

    if args.format == "verl":
        from mleforge.train.verl.rows import export_verl

        folder = Path(args.run_dir)
        folder = folder.parent if folder.is_file() else folder
        out = Path(args.out) if args.out else folder / "buffer_states.verl.parquet"
        n = export_verl(folder, out)
    else:
        with _open_buffer(args.run_dir) as buffer:
            out = Path(args.out) if args.out else buffer.path.parent / f"buffer_states.{args.format}"
            n = export_buffer(buffer, out, args.format)
    if args.json:
        print_json({"path": str(out), "format": args.format, "states": n})
    else:
        err_console.print(f"wrote {n} states to {out}", highlight=False)
    return 0
