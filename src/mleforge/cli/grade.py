"""`mleforge grade TASK SUBMISSION`: a submission file's grade, as MLE-bench reports it."""

from __future__ import annotations

import argparse

from mleforge.cli.options import (
    common,
    task_registry,
)
from mleforge.cli.output import REPORT_COLUMNS, print_json, print_table, report_row


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("grade", parents=[common()], help="grade a submission file")
    p.add_argument("task")
    p.add_argument("submission")
    p.add_argument("--part", choices=("private", "public", "full"), default="private",
                   help="the test rows to score: private (the final grade; default), public (what an agent "
                        "is shown) or full (all rows); mlebench: ids grade all rows for private")
    p.set_defaults(func=cmd_grade)


def cmd_grade(args: argparse.Namespace) -> int:
    from mleforge.grading.grader import grade

    report = grade(task_registry(args).get(args.task), args.submission, part=args.part)
    if args.json:
        print_json(report.to_dict())
    else:
        print_table(f"grade of {args.submission}", REPORT_COLUMNS, [report_row(report)])
        print_table("thresholds", ["gold", "silver", "bronze", "median", "lower is better"],
                    [[report.gold_threshold, report.silver_threshold, report.bronze_threshold,
                      report.median_threshold, report.is_lower_better]])
    # A missing or invalid submission is a failure a script must be able to see.
    return 0 if report.valid_submission else 1
