"""`mleforge exec TASK SCRIPT`: one script in a task's sandbox, graded here, outside it."""

from __future__ import annotations

import argparse
from pathlib import Path

from mleforge.cli.options import (
    add_isolation_option,
    common,
    executor_options,
    task_registry,
)
from mleforge.cli.output import (
    REPORT_COLUMNS,
    err_console,
    print_json,
    print_table,
    report_row,
    safe_text,
)
from mleforge.errors import MleforgeError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("exec", parents=[common()], help="run a script in a task's sandbox and grade its submission")
    p.add_argument("task")
    p.add_argument("script", help="a Python script: it reads ./input/ and writes ./submission/submission.csv")
    # The names of mleforge.sandbox.EXECUTOR_KINDS (not imported here: the CLI starts light).
    p.add_argument("--executor", default="local", choices=("local", "pool", "ray"),
                   help="local (a process per run), pool (forked from a warm zygote), ray (a Ray task per run)")
    add_isolation_option(p)
    p.add_argument("--cache", type=Path, metavar="PATH",
                   help="a result cache (SQLite): an identical earlier run is a lookup")
    p.add_argument("--cache-max-mb", type=float, metavar="MB",
                   help="bound the cache: the least recently used entries go first (default: unbounded)")
    p.add_argument("--timeout", type=float, help="wall-clock limit in seconds (default: the task's)")
    p.add_argument("--keep", action="store_true", help="keep the workspace (its path is in the result)")
    p.set_defaults(func=cmd_exec)


def cmd_exec(args: argparse.Namespace) -> int:
    """Run one script in a task's sandbox; grade its submission here, outside the sandbox."""
    from rich.panel import Panel

    from mleforge.cli.output import console
    from mleforge.grading.grader import grade
    from mleforge.sandbox import RunLimits, make_executor
    from mleforge.tasks.preparation import prepare

    task = task_registry(args).get(args.task)
    script_path = Path(args.script)
    if not script_path.is_file():
        raise MleforgeError(f"no script at {script_path}")
    prepare(task)
    limits = RunLimits.of(None, task.spec.limits, timeout_s=args.timeout)
    executor = make_executor(args.executor, **executor_options(args))
    if args.cache:
        from mleforge.sandbox.caching_executor import CachingExecutor

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
        err_console.print(safe_text(f"warning: {warning}", style="bold red"))
    # Text, not markup, without control characters: the script's output must not be able to
    # style, hide or rewrite anything, nor drive the terminal.
    for name in ("stdout", "stderr"):
        if getattr(result, name):
            console.print(Panel(safe_text(getattr(result, name)[-4000:]), title=f"{name} (tail)"))
    if report is None:
        console.print("no submission/submission.csv was written: nothing to grade", highlight=False)
    else:
        print_table("grade", REPORT_COLUMNS, [report_row(report)])
    return 0 if result.ok else 1
