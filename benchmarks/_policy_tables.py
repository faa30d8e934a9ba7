"""What the policy benchmarks (agent.py, eval_lite.py) share: per-policy options, the per-task
table, and their --out: one entry per policy (a later call adds or replaces policies) beside
the results convention's keys (benchmarks/_record.py)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from _record import stamp, table, write_json

# The convention's keys: never a policy's (a spec is template, bundled:NAME, hf:PATH, ...).
RESERVED = ("benchmark", "meta", "table", "tables")


def add_shared_flags(parser: Any, name: str) -> None:
    """The flags both scripts take; `name` is the script's (its default --root: bench-out/NAME)."""
    parser.add_argument("--policies", default="template,bundled:qwen2.5-coder-0.5b")
    parser.add_argument("--tasks", default="lite", help="lite | all | comma-separated task ids")
    parser.add_argument("--steps", default="3", help="per policy, comma-separated, or one for all")
    parser.add_argument("--budget-s", default="0", help="wall-time budget per policy in seconds (0: none)")
    parser.add_argument("--run-timeout", type=float, help="per-execution limit (default: the task's)")
    parser.add_argument("--threads", type=int, help="torch threads for local models")
    parser.add_argument("--max-new-tokens", type=int, default=700)
    parser.add_argument("--root", default=f"bench-out/{name}", help="run folders go here (resumable)")
    parser.add_argument("--out", type=Path, help="JSON results, updated after every policy")


def per_policy(text: str, n: int, kind: type) -> list[Any]:
    """One value for every policy, or one per policy, comma-separated."""
    values = [kind(v) for v in text.split(",")]
    if len(values) not in (1, n):
        raise SystemExit(f"give one value or {n} (one per policy): {text!r}")
    return values * n if len(values) == 1 else values


def policies_of(text: str) -> list[str]:
    """`--policies`: comma-separated specs, none of them a key of the convention."""
    policies = text.split(",")
    clash = [p for p in policies if p in RESERVED]
    if clash:
        raise SystemExit(f"--policies: {', '.join(clash)} is not a policy (a policy is template, bundled:NAME, "
                         "hf:PATH, ...)")
    return policies


def load_results(path: Path | None) -> dict[str, Any]:
    """The policies' entries of an earlier --out, whether it was written before the convention
    ({policy: entry} alone) or after it (with benchmark, meta and tables beside them)."""
    if path is None or not path.is_file():
        return {}
    return {k: v for k, v in json.loads(path.read_text(encoding="utf-8")).items() if k not in RESERVED}


def write_results(path: Path | None, benchmark: str, results: dict[str, Any],
                  tables: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The record of every policy measured so far, in the convention (this call's meta, `tables`
    as its table and further tables), written to `path` when one is given; returned either way."""
    first, *more = tables
    record = stamp({"tables": more, **results}, benchmark, first)
    if path is not None:
        write_json(path, record)
    return record


def per_task_table(title: str, results: dict[str, Any], cell: Callable[[dict[str, Any]], str]) -> dict[str, Any]:
    """A row per task, a column per policy; `cell` renders one policy's entry of a task
    (from its result's `per_task`); a task a policy did not run shows "-"."""
    ids = list(dict.fromkeys(t["task_id"] for r in results.values() for t in r["per_task"]))
    rows = []
    for task_id in ids:
        cells = []
        for r in results.values():
            entry = next((t for t in r["per_task"] if t["task_id"] == task_id), None)
            cells.append("-" if entry is None or not entry["runs"] else cell(entry))
        rows.append([task_id, *cells])
    return table(title, ["task", *(r["policy"] for r in results.values())], rows)
