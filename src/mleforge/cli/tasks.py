"""`mleforge tasks list|show|prepare|leaderboard|solve`: the tasks, their data, reference leaderboards."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from mleforge.cli.options import (
    add_selection,
    common,
    selected,
    task_registry,
)
from mleforge.cli.output import REPORT_COLUMNS, err_console, print_json, print_table, report_row
from mleforge.errors import ConfigError


def register(sub: argparse._SubParsersAction) -> None:
    tasks = sub.add_parser("tasks", help="list, show, prepare and rank tasks")
    tsub = tasks.add_subparsers(dest="tasks_command", required=True)

    p = tsub.add_parser("list", parents=[common()], help="the tasks this installation knows")
    p.add_argument("--mlebench", action="store_true", help="also list prepared MLE-bench competitions")
    p.set_defaults(func=cmd_tasks_list)

    p = tsub.add_parser("show", parents=[common()], help="one task's spec and description")
    p.add_argument("id")
    p.set_defaults(func=cmd_tasks_show)

    p = tsub.add_parser("prepare", parents=[common()], help="prepare task data (skips intact preparations)")
    add_selection(p)
    p.add_argument("--force", action="store_true", help="prepare again even if intact")
    p.set_defaults(func=cmd_tasks_prepare)

    p = tsub.add_parser("leaderboard", parents=[common()], help="build a reference leaderboard from a seeded grid of solutions")
    add_selection(p)
    p.add_argument("--check", action="store_true", help="rebuild and compare with the committed file; exit 1 on a difference")
    p.add_argument("--sample", type=int, metavar="K",
                   help="with --check: rebuild only K entries spread over the committed board (best, worst, evenly between)")
    p.set_defaults(func=cmd_tasks_leaderboard)

    p = tsub.add_parser("solve", parents=[common()], help="run a reference solution on tasks and grade its submission")
    add_selection(p)
    p.add_argument("--solution", help="reference solution name (default: the task's best on its leaderboard)")
    p.add_argument("--out", default="runs/solve", help="where submissions are written")
    p.set_defaults(func=cmd_tasks_solve)


def _rows(task) -> dict:
    from mleforge.tasks.preparation import read_manifest

    manifest = read_manifest(task)
    return (manifest or {}).get("rows", {"train": None, "test": None})


def cmd_tasks_list(args: argparse.Namespace) -> int:
    registry = task_registry(args)
    tasks = registry.tasks(include_mlebench=args.mlebench)
    items = [{**t.to_dict(), "rows": _rows(t)} for t in tasks]
    if args.json:
        print_json(items + [{**b.to_dict(), "broken": True} for b in registry.broken])
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
    if registry.broken:
        print_table(f"{len(registry.broken)} broken task folder(s)", ["folder", "error"],
                    [[b.name, b.error] for b in registry.broken])
    return 0


def cmd_tasks_show(args: argparse.Namespace) -> int:
    task = task_registry(args).get(args.id)
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

    from mleforge.tasks.preparation import prepare

    tasks = selected(args, task_registry(args))
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
    from mleforge.tasks.preparation import prepare

    if args.sample is not None and not args.check:
        raise ConfigError("--sample checks part of a committed leaderboard: use it with --check "
                          "(a build always runs the whole grid)")
    tasks = selected(args, task_registry(args))
    out, failed = [], False
    with Progress(console=err_console, transient=True, disable=args.json) as progress:
        bar = progress.add_task("leaderboards", total=len(tasks))
        for task in tasks:
            progress.update(bar, description=f"{'checking' if args.check else 'building'} {task.id}")
            prepare(task)
            start = time.perf_counter()
            if args.check:
                diffs = check_leaderboard(task, sample=args.sample)
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


def cmd_tasks_solve(args: argparse.Namespace) -> int:
    """Prepare tasks, run a reference solution on each, write and grade its submission."""
    from rich.progress import Progress

    from mleforge.grading.grader import grade
    from mleforge.grading.report import aggregate_reports
    from mleforge.reference.solutions import pick_solution
    from mleforge.tasks.preparation import prepare, read_public

    tasks = selected(args, task_registry(args))
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
                    [report_row(r) for r in reports])
        print_table("totals", ["runs", "valid", "medals", "gold", "above median", "mean normalized"],
                    [[summary["total_runs"], summary["total_valid_submissions"], summary["total_medals"],
                      summary["total_gold_medals"], summary["total_above_median"],
                      summary["mean_normalized_score"]]])
    return 0
