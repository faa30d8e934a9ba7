"""`mleforge`: tasks, grading and (in later layers) runs, training and evaluation."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from mleforge.cli.output import err_console, print_json, print_table
from mleforge.errors import MleforgeError


def _registry(args: argparse.Namespace):
    from mleforge.tasks.registry import TaskRegistry

    return TaskRegistry(task_dirs=args.tasks_dir or (), data_dir=args.data_dir)


def _selected(args: argparse.Namespace, registry) -> list:
    if getattr(args, "all", False):
        return registry.tasks()
    if getattr(args, "lite", False):
        return registry.select("lite")
    if not args.ids:
        raise MleforgeError("name task ids, or pass --all (or --lite)")
    return [registry.get(i) for i in args.ids]


def _rows(task) -> dict:
    from mleforge.tasks.prepare import read_manifest

    manifest = read_manifest(task)
    return (manifest or {}).get("rows", {"train": None, "test": None})


def cmd_tasks_list(args: argparse.Namespace) -> int:
    registry = _registry(args)
    tasks = registry.tasks(include_mlebench=args.mlebench)
    items = [{**t.to_dict(), "rows": _rows(t)} for t in tasks]
    if args.json:
        print_json(items)
        return 0
    print_table(
        f"{len(items)} tasks (data root {registry.data_dir})",
        ["id", "modality", "problem", "metric", "direction", "train rows", "test rows", "lite"],
        [
            [i["id"], i["modality"], i["problem"], i["metric"], i["direction"],
             i["rows"].get("train"), i["rows"].get("test"), "lite" in i["tags"]]
            for i in items
        ],
    )
    return 0


def cmd_tasks_show(args: argparse.Namespace) -> int:
    task = _registry(args).get(args.id)
    info = {**task.to_dict(), "rows": _rows(task), "description": task.description()}
    if args.json:
        print_json(info)
        return 0
    from rich.markdown import Markdown

    from mleforge.cli.output import console

    print_table(task.id, ["key", "value"], [[k, v] for k, v in info.items() if k != "description"])
    console.print(Markdown(info["description"]))
    return 0


def cmd_tasks_prepare(args: argparse.Namespace) -> int:
    from rich.progress import Progress

    from mleforge.tasks.prepare import prepare

    tasks = _selected(args, _registry(args))
    results = []
    with Progress(console=err_console, transient=True, disable=args.json) as progress:
        bar = progress.add_task("preparing", total=len(tasks))
        for task in tasks:
            progress.update(bar, description=f"preparing {task.id}")
            start = time.perf_counter()
            result = prepare(task, force=args.force)
            results.append({
                "id": task.id, "status": result.status, "reason": result.reason,
                "path": str(result.prepared_dir), "seconds": round(time.perf_counter() - start, 3),
            })
            progress.advance(bar)
    if args.json:
        print_json(results)
    else:
        print_table("preparation", ["id", "status", "reason", "seconds", "path"],
                    [[r["id"], r["status"], r["reason"], r["seconds"], r["path"]] for r in results])
    return 0


def cmd_tasks_leaderboard(args: argparse.Namespace) -> int:
    from rich.progress import Progress

    from mleforge.reference.leaderboard import (
        build_leaderboard,
        check_leaderboard,
        write_leaderboard,
    )
    from mleforge.tasks.prepare import prepare

    tasks = _selected(args, _registry(args))
    out, failed = [], False
    with Progress(console=err_console, transient=True, disable=args.json) as progress:
        bar = progress.add_task("leaderboards", total=len(tasks))
        for task in tasks:
            progress.update(bar, description=f"{'checking' if args.check else 'building'} {task.id}")
            prepare(task)
            start = time.perf_counter()
            if args.check:
                diffs = check_leaderboard(task)
                failed |= bool(diffs)
                out.append({"id": task.id, "same": not diffs, "differences": diffs})
            else:
                board = build_leaderboard(task)
                path = write_leaderboard(task, board)
                out.append({"id": task.id, "entries": len(board), "best": float(board["score"].iloc[0]),
                            "median": float(board["score"].median()), "path": str(path)})
            out[-1]["seconds"] = round(time.perf_counter() - start, 2)
            progress.advance(bar)
    if args.json:
        print_json(out)
    elif args.check:
        print_table("leaderboard check", ["id", "same", "differences", "seconds"],
                    [[o["id"], o["same"], "; ".join(o["differences"][:3]), o["seconds"]] for o in out])
    else:
        print_table("leaderboards", ["id", "entries", "best", "median", "seconds", "path"],
                    [[o["id"], o["entries"], o["best"], o["median"], o["seconds"], o["path"]] for o in out])
    return 1 if failed else 0


REPORT_COLUMNS = ["task", "metric", "score", "normalized", "medal", "above median", "valid", "reason"]


def _medal(report) -> str:
    for name in ("gold", "silver", "bronze"):
        if getattr(report, f"{name}_medal"):
            return name
    return "-"


def _report_row(report) -> list:
    return [report.competition_id, report.metric, report.score, report.normalized_score, _medal(report),
            report.above_median, report.valid_submission, report.invalid_reason]


def cmd_grade(args: argparse.Namespace) -> int:
    from mleforge.grading.grader import grade

    report = grade(_registry(args).get(args.task), args.submission)
    if args.json:
        print_json(report.to_dict())
    else:
        print_table(f"grade of {args.submission}", REPORT_COLUMNS, [_report_row(report)])
        print_table("thresholds", ["gold", "silver", "bronze", "median", "lower is better"],
                    [[report.gold_threshold, report.silver_threshold, report.bronze_threshold,
                      report.median_threshold, report.is_lower_better]])
    return 0


def cmd_exec(args: argparse.Namespace) -> int:
    """Run one script in a task's sandbox; grade its submission here, outside the sandbox."""
    from rich.panel import Panel
    from rich.text import Text

    from mleforge.cli.output import console
    from mleforge.grading.grader import grade
    from mleforge.sandbox import RunLimits, make_executor
    from mleforge.tasks.prepare import prepare

    task = _registry(args).get(args.task)
    script_path = Path(args.script)
    if not script_path.is_file():
        raise MleforgeError(f"no script at {script_path}")
    prepare(task)
    limits = RunLimits.of(None, task.spec.limits, timeout_s=args.timeout)
    options = {"isolation": args.isolation} if args.isolation else {}
    executor = make_executor(args.executor, **options)
    if args.cache:
        from mleforge.sandbox.caching import CachingExecutor

        executor = CachingExecutor(executor, args.cache, max_mb=args.cache_max_mb)
    with executor:
        result = executor.run(script_path.read_text(encoding="utf-8"), task, limits, keep=args.keep)
        # The submission lives in the executor's folder until close(): grade it now.
        report = grade(task, result.submission_path) if result.submission_path else None
    if args.json:
        print_json({"result": result.to_dict(), "grade": report.to_dict() if report else None})
        return 0 if result.ok else 1
    fields = ["isolation", "returncode", "signal", "killed_by", "timed_out", "wall_s", "cpu_s",
              "peak_memory_mb", "stdout_bytes", "stderr_bytes", "submission_path", "workspace", "cached"]
    print_table(f"execution of {script_path} on {task.id} (run {result.run_id})", ["field", "value"],
                [[name, getattr(result, name)] for name in fields])
    for warning in result.warnings:
        err_console.print(Text(f"warning: {warning}", style="bold red"))
    # Text, not markup: the script's output must not be able to style (or hide) anything.
    for name in ("stdout", "stderr"):
        if getattr(result, name):
            console.print(Panel(Text(getattr(result, name)[-4000:]), title=f"{name} (tail)"))
    if report is None:
        console.print("no submission/submission.csv was written: nothing to grade", highlight=False)
    else:
        print_table("grade", REPORT_COLUMNS, [_report_row(report)])
    return 0 if result.ok else 1


def cmd_tasks_solve(args: argparse.Namespace) -> int:
    """Prepare tasks, run a reference solution on each, write and grade its submission."""
    from rich.progress import Progress

    from mleforge.grading.grader import grade
    from mleforge.grading.report import aggregate_reports
    from mleforge.reference.solutions import pick_solution
    from mleforge.tasks.prepare import prepare
    from mleforge.utils.io import read_public

    tasks = _selected(args, _registry(args))
    out_dir = Path(args.out).resolve()
    reports = []
    with Progress(console=err_console, transient=True, disable=args.json) as progress:
        bar = progress.add_task("solving", total=len(tasks))
        for task in tasks:
            progress.update(bar, description=f"{task.id}: preparing")
            prepare(task)
            solution = pick_solution(task, args.solution)
            progress.update(bar, description=f"{task.id}: {solution.name}")
            train, test = read_public(task)
            submission = solution.fit_predict(task, train, test)
            path = out_dir / task.id / "submission.csv"
            path.parent.mkdir(parents=True, exist_ok=True)
            submission.to_csv(path, index=False)
            reports.append(grade(task, path))
            progress.advance(bar)
    summary = aggregate_reports(reports)
    if args.json:
        print_json(summary)
    else:
        print_table(f"reference solutions graded (submissions in {out_dir})", REPORT_COLUMNS,
                    [_report_row(r) for r in reports])
        print_table("totals", ["runs", "valid", "medals", "gold", "above median", "mean normalized"],
                    [[summary["total_runs"], summary["total_valid_submissions"], summary["total_medals"],
                      summary["total_gold_medals"], summary["total_above_median"],
                      summary["mean_normalized_score"]]])
    return 0


def _policy_options(args: argparse.Namespace, registry) -> dict:
    """Options for make_policy: the template expert reads tasks from the same registry;
    local models use one torch thread per core share."""
    prefix = args.policy.partition(":")[0]
    if prefix == "template":
        return {"registry": registry}
    if prefix in ("hf", "bundled") and args.threads:
        return {"num_threads": args.threads}
    return {}


def cmd_run(args: argparse.Namespace) -> int:
    """One episode of AIDE-style search on one task with one policy, live progress, resumable."""
    import shutil

    import numpy as np
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from mleforge.agent.ideas import explore, sample_ideas
    from mleforge.agent.runner import EpisodeConfig, EpisodeRunner
    from mleforge.agent.search import SearchConfig
    from mleforge.policies import make_policy
    from mleforge.sandbox import make_executor
    from mleforge.tasks.prepare import prepare

    registry = _registry(args)
    task = registry.get(args.task)
    prepare(task)
    safe_policy = args.policy.replace("/", "_").replace(":", "-")
    run_dir = Path(args.run_dir or f"runs/run/{task.id}/{safe_policy}/seed{args.seed}").resolve()
    if args.fresh and run_dir.exists():
        shutil.rmtree(run_dir)
    config = EpisodeConfig(
        steps=args.steps, time_limit_s=args.time_limit, run_timeout_s=args.run_timeout, seed=args.seed,
        search=SearchConfig(num_drafts=args.drafts), max_new_tokens=args.max_new_tokens,
        temperature=args.temperature,
    )
    policy = make_policy(args.policy, **_policy_options(args, registry))
    ideas: tuple[str, ...] = ()
    if args.ideas:  # ML-Agent's exploration enrichment: 1..K of the most diverse ideas
        selection = explore(task, k=10, seed=args.seed)
        ideas = sample_ideas(selection.selected, np.random.default_rng(args.seed), low=1, high=args.ideas)
    best: list = [None]
    try:
        with make_executor(args.executor) as executor, Progress(
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
    if args.json:
        print_json(result.to_dict())
        return 0
    rows = [[n["step"] + 1, n["stage"], n["outcome"], n["score"], n["reward"]["total"]]
            for n in map(json.loads, (run_dir / "steps.jsonl").read_text().splitlines())]
    print_table(f"run {run_dir}", ["step", "stage", "outcome", "score", "reward"], rows)
    if result.report is None:
        err_console.print("no valid submission in this run", style="bold red")
    else:
        print_table("final answer (best valid node)", REPORT_COLUMNS, [_report_row(result.report)])
    print_table("summary", ["steps", "first valid at step", "wall s", "completion tokens", "stopped by"],
                [[result.steps, result.steps_to_first_valid, result.wall_s, result.completion_tokens,
                  result.stopped_by]])
    return 0


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

    with _open_buffer(args.run_dir) as buffer:
        out = Path(args.out) if args.out else buffer.path.parent / f"buffer_states.{args.format}"
        n = export_buffer(buffer, out, args.format)
    if args.json:
        print_json({"path": str(out), "format": args.format, "states": n})
    else:
        err_console.print(f"wrote {n} states to {out}", highlight=False)
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    """Evaluate a policy on tasks x seeds (MLE-bench style), in parallel, resumable; writes aggregate.json."""
    from mleforge.eval.config import EvalConfig
    from mleforge.eval.progress import RichGridProgress
    from mleforge.eval.runner import EvalGrid, safe_name
    from mleforge.eval.sections import pm

    local = args.policy.partition(":")[0] in ("hf", "bundled")
    config = EvalConfig(
        policy=args.policy, tasks=args.tasks, seeds=args.seeds, first_seed=args.first_seed, steps=args.steps,
        time_limit_s=args.time_limit, run_timeout_s=args.run_timeout, workers=args.workers, drafts=args.drafts,
        max_new_tokens=args.max_new_tokens, temperature=args.temperature, executor=args.executor,
        policy_options={"num_threads": args.threads} if local and args.threads else {},
        train_runs=tuple(args.trained_on or ()),
    )
    grid = EvalGrid(config, args.out or f"runs/eval/{safe_name(args.policy)}", registry=_registry(args))
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


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--data-dir", help="data root (default $MLEFORGE_DATA or ~/.cache/mleforge/data)")
    common.add_argument("--tasks-dir", action="append", help="a task folder or a folder of task folders (repeatable)")
    common.add_argument("--json", action="store_true", help="print JSON instead of tables")

    parser = argparse.ArgumentParser(prog="mleforge", description=__doc__)
    from mleforge import __version__

    parser.add_argument("--version", action="version", version=f"mleforge {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    tasks = sub.add_parser("tasks", help="list, show, prepare and rank tasks")
    tsub = tasks.add_subparsers(dest="tasks_command", required=True)

    p = tsub.add_parser("list", parents=[common], help="the tasks this installation knows")
    p.add_argument("--mlebench", action="store_true", help="also list prepared MLE-bench competitions")
    p.set_defaults(func=cmd_tasks_list)

    p = tsub.add_parser("show", parents=[common], help="one task's spec and description")
    p.add_argument("id")
    p.set_defaults(func=cmd_tasks_show)

    def selection(p: argparse.ArgumentParser) -> None:
        p.add_argument("ids", nargs="*", help="task ids")
        p.add_argument("--all", action="store_true", help="every registered task")
        p.add_argument("--lite", action="store_true", help="the lite subset")

    p = tsub.add_parser("prepare", parents=[common], help="prepare task data (skips intact preparations)")
    selection(p)
    p.add_argument("--force", action="store_true", help="prepare again even if intact")
    p.set_defaults(func=cmd_tasks_prepare)

    p = tsub.add_parser("leaderboard", parents=[common], help="build a reference leaderboard from a seeded grid of solutions")
    selection(p)
    p.add_argument("--check", action="store_true", help="rebuild and compare with the committed file; exit 1 on a difference")
    p.set_defaults(func=cmd_tasks_leaderboard)

    p = tsub.add_parser("solve", parents=[common], help="run a reference solution on tasks and grade its submission")
    selection(p)
    p.add_argument("--solution", help="reference solution name (default: the task's best on its leaderboard)")
    p.add_argument("--out", default="runs/solve", help="where submissions are written")
    p.set_defaults(func=cmd_tasks_solve)

    p = sub.add_parser("grade", parents=[common], help="grade a submission file")
    p.add_argument("task")
    p.add_argument("submission")
    p.set_defaults(func=cmd_grade)

    p = sub.add_parser("exec", parents=[common], help="run a script in a task's sandbox and grade its submission")
    p.add_argument("task")
    p.add_argument("script", help="a Python script: it reads ./input/ and writes ./submission/submission.csv")
    # The names of mleforge.sandbox.EXECUTOR_KINDS (not imported here: the CLI starts light).
    p.add_argument("--executor", default="local", choices=("local", "pool", "ray"),
                   help="local (a process per run), pool (forked from a warm zygote), ray (a Ray task per run)")
    p.add_argument("--isolation", choices=("auto", "bwrap", "none"),
                   help="sandbox isolation of the executor (on the nodes, for ray) (default: auto)")
    p.add_argument("--cache", type=Path, metavar="PATH",
                   help="a result cache (SQLite): an identical earlier run is a lookup")
    p.add_argument("--cache-max-mb", type=float, metavar="MB",
                   help="bound the cache: the least recently used entries go first (default: unbounded)")
    p.add_argument("--timeout", type=float, help="wall-clock limit in seconds (default: the task's)")
    p.add_argument("--keep", action="store_true", help="keep the workspace (its path is in the result)")
    p.set_defaults(func=cmd_exec)

    p = sub.add_parser("run", parents=[common], help="run the agent on one task (AIDE-style search), resumable")
    p.add_argument("--task", required=True, help="task id (mlebench:<id> for MLE-bench)")
    p.add_argument("--policy", default="template",
                   help="template | openai:<model> | hf:<path> | bundled:smollm2-135m | bundled:qwen2.5-coder-0.5b")
    p.add_argument("--steps", type=int, default=8, help="steps of search (default 8)")
    p.add_argument("--drafts", type=int, default=2, help="drafts before debugging/improving (default 2)")
    p.add_argument("--time-limit", type=float, help="wall-time limit for the episode, in seconds")
    p.add_argument("--run-timeout", type=float, help="per-execution limit (default: the task's)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--ideas", type=int, default=0, help="exploration ideas injected into the first prompt (1-3)")
    p.add_argument("--temperature", type=float, default=0.7)
    p.add_argument("--max-new-tokens", type=int, default=2048)
    p.add_argument("--threads", type=int, help="torch threads for local models")
    p.add_argument("--executor", default="local", help="sandbox backend (default local)")
    p.add_argument("--run-dir", help="run directory (default runs/run/<task>/<policy>/seed<seed>; resumed if present)")
    p.add_argument("--fresh", action="store_true", help="delete the run directory first instead of resuming")
    p.set_defaults(func=cmd_run)

    buffer = sub.add_parser("buffer", help="inspect and export a run's state buffer (curriculum)")
    bsub = buffer.add_subparsers(dest="buffer_command", required=True)
    p = bsub.add_parser("show", parents=[common], help="sizes, top states by learnability potential, growth")
    p.add_argument("run_dir", help="a run directory (holding buffer.sqlite) or the .sqlite file")
    p.add_argument("--top", type=int, default=10, help="how many states to list by LP")
    p.add_argument("--steps", type=int, default=20, help="last steps of growth in the table (0: all)")
    p.set_defaults(func=cmd_buffer_show)
    p = bsub.add_parser("export", parents=[common], help="write the live states as jsonl or parquet (verl)")
    p.add_argument("run_dir", help="a run directory (holding buffer.sqlite) or the .sqlite file")
    p.add_argument("--format", choices=("jsonl", "parquet"), default="jsonl")
    p.add_argument("--out", help="output file (default RUN_DIR/buffer_states.FORMAT)")
    p.set_defaults(func=cmd_buffer_export)

    p = sub.add_parser("eval", parents=[common],
                       help="evaluate a policy on tasks x seeds like MLE-bench (resumable); writes aggregate.json")
    p.add_argument("--policy", default="template",
                   help="template | openai:<model> | hf:<path> | bundled:smollm2-135m | bundled:qwen2.5-coder-0.5b")
    p.add_argument("--tasks", default="lite", help="lite | all | id,id,... (mlebench:<id> for MLE-bench); default lite")
    p.add_argument("--seeds", type=int, default=3, help="seeds per task (default 3)")
    p.add_argument("--first-seed", type=int, default=0)
    p.add_argument("--steps", type=int, default=8, help="steps of search per run (default 8)")
    p.add_argument("--time-limit", type=float, help="wall-time limit of one run, in seconds")
    p.add_argument("--run-timeout", type=float, help="per-execution limit (default: the task's)")
    p.add_argument("--workers", type=int, help="runs at once (default: half the CPUs); generation is serialized")
    p.add_argument("--drafts", type=int, default=2, help="drafts before debugging/improving (default 2)")
    p.add_argument("--temperature", type=float, default=0.7)
    p.add_argument("--max-new-tokens", type=int, default=2048)
    p.add_argument("--threads", type=int, help="torch threads for local models")
    p.add_argument("--executor", default="local", help="sandbox backend (default local)")
    p.add_argument("--trained-on", action="append",
                   help="a training run folder or record whose tasks the policy saw (repeatable; contamination guard)")
    p.add_argument("--out", help="evaluation folder (default runs/eval/<policy>; resumed if present)")
    p.add_argument("--fresh", action="store_true", help="delete the evaluation folder first instead of resuming")
    p.set_defaults(func=cmd_eval)

    p = sub.add_parser("report", parents=[common], help="Markdown + HTML report (tables, plots) of runs, side by side")
    p.add_argument("runs", nargs="+", help="run folders (e.g. what `mleforge eval` wrote)")
    p.add_argument("--out", help="output folder (default RUN/report for one run, runs/report for several)")
    p.add_argument("--labels", help="comma-separated names of the runs in the report (default: their policies)")
    p.add_argument("--title", help="report title")
    p.set_defaults(func=cmd_report)
    from mleforge.cli import (  # training commands: their own modules (register(subparsers))
        sft,
        train,
    )
    for module in (sft, train):
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except MleforgeError as exc:
        err_console.print(f"[bold red]error:[/] {exc}", highlight=False)
        return 2


if __name__ == "__main__":
    sys.exit(main())
