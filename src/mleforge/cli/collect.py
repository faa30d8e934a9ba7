"""`mleforge collect`: expert trajectories with exploration enrichment, as journals and SFT samples.

    mleforge collect --tasks lite --teacher template --episodes 2 --steps 6 --out runs/collect
    mleforge collect --teacher openai:gpt-4o-mini --prompt-profile compact --keep-failures

Resumable: the same command again continues an interrupted collect.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from mleforge.cli.options import add_isolation_option, common


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `collect`, with the root's shared options (--data-dir, --tasks-dir, --json)."""
    from mleforge.expert.collect_config import CollectConfig

    defaults = CollectConfig()
    p = subparsers.add_parser("collect", parents=[common()],
                              help="expert trajectories (exploration-enriched) as journals and SFT samples; resumable")
    p.add_argument("--tasks", default=defaults.tasks, help="lite | all | id,id,... (default lite)")
    p.add_argument("--teacher", default=defaults.teacher, help="template (offline) | openai:<model> (default template)")
    p.add_argument("--episodes", type=int, default=defaults.episodes,
                   help=f"episodes per task and seed (default {defaults.episodes})")
    p.add_argument("--seeds", type=int, default=defaults.seeds, help=f"seeds per task (default {defaults.seeds})")
    p.add_argument("--first-seed", type=int, default=defaults.first_seed)
    p.add_argument("--steps", type=int, default=defaults.steps, help=f"steps per episode (default {defaults.steps})")
    p.add_argument("--drafts", type=int, default=defaults.drafts, help="drafts before debugging/improving")
    p.add_argument("--ideas", type=int, default=defaults.ideas_high,
                   help=f"at most this many diverse ideas in each episode's first prompt, at least 1 "
                        f"(default {defaults.ideas_high}; 0: none)")
    p.add_argument("--idea-source", choices=("catalog", "teacher"), default=defaults.idea_source,
                   help="the idea pool: the template's catalog, or ideas the teacher writes")
    p.add_argument("--embedder", choices=("auto", "minilm", "tfidf"), default=defaults.embedder,
                   help="idea diversity measured with MiniLM (when installed) or TF-IDF")
    p.add_argument("--prompt-profile", choices=("full", "compact"), default=defaults.prompt_profile,
                   help="how the samples' prompts are rendered (default full; compact for the CPU preset)")
    p.add_argument("--code-chars", type=int, help="the target script's budget in the samples' prompts")
    p.add_argument("--keep-failures", action="store_true", help="also keep steps that did not produce a valid submission")
    p.add_argument("--keep-hidden-edits", action="store_true",
                   help="also keep edits of lines the prompt's view of the script hides")
    p.add_argument("--temperature", type=float, default=defaults.temperature)
    p.add_argument("--max-new-tokens", type=int, default=defaults.max_new_tokens)
    p.add_argument("--run-timeout", type=float, help="per-execution limit (default: the task's)")
    p.add_argument("--workers", type=int, help="episodes at once (default: half the CPUs)")
    p.add_argument("--executor", default=defaults.executor, help="sandbox backend (default local)")
    add_isolation_option(p)
    p.add_argument("--out", default="runs/collect", help="collect folder (default runs/collect; resumed if present)")
    p.add_argument("--fresh", action="store_true", help="delete the folder first instead of resuming")
    p.set_defaults(func=cmd_collect)


def config_from_args(args: argparse.Namespace):
    from mleforge.expert.collect_config import CollectConfig

    return CollectConfig(
        tasks=args.tasks, teacher=args.teacher, episodes=args.episodes, seeds=args.seeds,
        first_seed=args.first_seed, steps=args.steps, drafts=args.drafts, ideas_low=min(1, args.ideas),
        ideas_high=args.ideas, idea_source=args.idea_source, embedder=args.embedder,
        max_new_tokens=args.max_new_tokens, temperature=args.temperature, run_timeout_s=args.run_timeout,
        workers=args.workers, executor=args.executor, isolation=args.isolation, prompt_profile=args.prompt_profile,
        code_chars=args.code_chars, keep_failures=args.keep_failures, keep_hidden_edits=args.keep_hidden_edits,
    )


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
