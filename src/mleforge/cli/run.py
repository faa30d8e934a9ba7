"""`mleforge run`: one episode of AIDE-style search on one task with one policy, resumable."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from mleforge.cli.options import (
    POLICY_HELP,
    add_feedback_option,
    add_generation_options,
    common,
    executor_options,
    policy_options,
    task_registry,
)
from mleforge.cli.output import REPORT_COLUMNS, err_console, print_json, print_table, report_row


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", parents=[common()], help="run the agent on one task (AIDE-style search), resumable")
    p.add_argument("--task", required=True, help="task id (mlebench:<id> for MLE-bench)")
    p.add_argument("--policy", default="template", help=POLICY_HELP)
    p.add_argument("--steps", type=int, default=8, help="steps of search (default 8)")
    p.add_argument("--drafts", type=int, default=2, help="drafts before debugging/improving (default 2)")
    p.add_argument("--time-limit", type=float, help="wall-time limit for the episode, in seconds")
    p.add_argument("--run-timeout", type=float, help="per-execution limit (default: the task's)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--ideas", type=int, default=0, help="exploration ideas injected into the first prompt (1-3)")
    add_generation_options(p)
    add_feedback_option(p)
    p.add_argument("--run-dir", help="run directory (default runs/run/<task>/<policy>/seed<seed>; resumed if present)")
    p.add_argument("--fresh", action="store_true", help="delete the run directory first instead of resuming")
    p.set_defaults(func=cmd_run)


def cmd_run(args: argparse.Namespace) -> int:
    """One episode of AIDE-style search on one task with one policy, live progress, resumable."""
    import shutil

    import numpy as np
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from mleforge.agent.runner import EpisodeConfig, EpisodeRunner
    from mleforge.agent.search import SearchConfig
    from mleforge.expert.ideas import explore, sample_ideas
    from mleforge.policies import make_policy
    from mleforge.sandbox import make_executor
    from mleforge.tasks.preparation import prepare

    registry = task_registry(args)
    task = registry.get(args.task)
    prepare(task)
    safe_policy = args.policy.replace("/", "_").replace(":", "-")
    run_dir = Path(args.run_dir or f"runs/run/{task.id}/{safe_policy}/seed{args.seed}").resolve()
    if args.fresh and run_dir.exists():
        shutil.rmtree(run_dir)
    config = EpisodeConfig(
        steps=args.steps, time_limit_s=args.time_limit, run_timeout_s=args.run_timeout, seed=args.seed,
        search=SearchConfig(num_drafts=args.drafts), max_new_tokens=args.max_new_tokens,
        temperature=args.temperature, feedback=args.feedback,
    )
    policy = make_policy(args.policy, **policy_options(args, registry))
    ideas: tuple[str, ...] = ()
    if args.ideas:  # ML-Agent's exploration enrichment: 1..K of the most diverse ideas
        selection = explore(task, k=10, seed=args.seed)
        ideas = sample_ideas(selection.selected, np.random.default_rng(args.seed), low=1, high=args.ideas)
    best: list = [None]
    try:
        with make_executor(args.executor, **executor_options(args)) as executor, Progress(
            TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            console=err_console, disable=args.json,
        ) as progress:
            bar = progress.add_task(f"{task.id} with {args.policy}", total=args.steps)

            def on_step(outcome) -> None:
                node = outcome.node
                if node.valid and (best[0] is None or (node.score < best[0] if task.is_lower_better
                                                       else node.score > best[0])):
                    best[0] = node.score
                shown = "-" if node.score is None else f"{node.score:.5g}"
                progress.update(bar, advance=1, description=(
                    f"{task.id}: step {node.step + 1} {outcome.state.stage} -> {node.outcome} "
                    f"(score {shown}, best {best[0] if best[0] is not None else '-'})"))

            runner = EpisodeRunner(task, policy, executor, config, run_dir, ideas=ideas,
                                   policy_name=args.policy, on_step=on_step)
            result = runner.run()
    finally:
        policy.close()
    _print_result(args, result, run_dir)
    return 0


def _print_result(args: argparse.Namespace, result, run_dir: Path) -> None:
    """The episode's result: JSON, or its steps, final answer and summary as tables."""
    if args.json:
        print_json(result.to_dict())
        return
    rows = [[n["step"] + 1, n["stage"], n["outcome"], n["score"], n["reward"]["total"]]
            for n in map(json.loads, (run_dir / "steps.jsonl").read_text().splitlines())]
    print_table(f"run {run_dir}", ["step", "stage", "outcome", "score", "reward"], rows)
    if result.report is None:
        err_console.print("no valid submission in this run", style="bold red")
    else:
        chosen = "best public score" if result.feedback == "public" else "last valid node: feedback none"
        print_table(f"final answer ({chosen}), graded on the private part", REPORT_COLUMNS,
                    [report_row(result.report)])
    print_table("summary", ["steps", "first valid at step", "wall s", "completion tokens", "stopped by"],
                [[result.steps, result.steps_to_first_valid, result.wall_s, result.completion_tokens,
                  result.stopped_by]])
