"""`mleforge collect`: expert trajectories with exploration enrichment, as journals and SFT samples.

    mleforge collect --tasks lite --teacher template --episodes 2 --steps 6 --out runs/collect
    mleforge collect --teacher openai:gpt-4o-mini --prompt-profile compact --keep-failures
    mleforge collect --config collect.yaml --episodes 4

Every CollectConfig setting is a flag generated from its field; `--config FILE` reads them from
YAML, and the flags given win. Resumable: the same command again continues an interrupted collect.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from mleforge import config as tree
from mleforge.cli.options import add_config_file, common
from mleforge.expert.collect_config import CollectConfig


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `collect`, with the root's shared options (--data-dir, --tasks-dir, --json)."""
    p = subparsers.add_parser("collect", parents=[common()],
                              help="expert trajectories (exploration-enriched) as journals and SFT samples; resumable")
    add_config_file(p, "a CollectConfig YAML file; flags over it")
    tree.add_arguments(p, CollectConfig, aliases={"run_timeout_s": ("--run-timeout",)})
    p.add_argument("--ideas", type=int, help="at most this many diverse ideas in each episode's first prompt, at "
                                             "least 1 (sets ideas_high N, ideas_low min(1, N); 0: none)")
    p.add_argument("--out", default="runs/collect", help="collect folder (default runs/collect; resumed if present)")
    p.add_argument("--fresh", action="store_true", help="delete the folder first instead of resuming")
    p.set_defaults(func=cmd_collect)


def config_from_args(args: argparse.Namespace) -> CollectConfig:
    """The dataclass defaults < `--config FILE` < the flags given (--ideas N: ideas_high N, ideas_low min(1, N))."""
    file = tree.load_yaml(args.config) if getattr(args, "config", None) else {}
    flags = tree.given(args)
    if getattr(args, "ideas", None) is not None:
        flags = {**flags, "ideas_low": min(1, args.ideas), "ideas_high": args.ideas}
    return CollectConfig.from_dict(tree.merge(file, flags))


def cmd_collect(args: argparse.Namespace) -> int:
    from mleforge.cli.output import err_console, print_json, print_table
    from mleforge.expert.collect import collect_samples
    from mleforge.tasks.registry import TaskRegistry

    config = config_from_args(args)
    registry = TaskRegistry(task_dirs=getattr(args, "tasks_dir", None) or (), data_dir=getattr(args, "data_dir", None))
    result = collect_samples(config, Path(args.out), registry=registry, progress=not args.json,
                             fresh=args.fresh, console=err_console)
    counts = result.counts
    if args.json:
        print_json(result.to_dict())
        return 0
    print_table(f"collected {counts['samples']} samples from {counts['steps']} steps of "
                f"{counts['episodes']['finished']}/{counts['episodes']['expected']} episodes "
                f"({result.skipped} found finished)",
                ["stage", "samples"], [[k, v] for k, v in counts["samples_by_stage"].items()])
    print_table("outcomes of all steps", ["outcome", "steps"], [[k, v] for k, v in counts["outcomes"].items()])
    if counts["left_out"]:
        print_table("steps left out of the samples", ["why", "steps"],
                    [[k, v] for k, v in counts["left_out"].items()])
    err_console.print(f"samples: {result.samples_path}; journals: {result.journals_dir}", highlight=False)
    return 0
