"""Build a leaderboard in a child process whose numerical environment is pinned.

The pin (`mleforge.reference.numerics`) is read by OpenBLAS, numpy and MKL when they load,
so it cannot be set in a process that has already imported them: the parent starts
`python -m mleforge.reference.pinned`, which builds the board and answers on stdout, one
JSON object a line: `{"done", "total", "entry"}` after each entry, then `{"board",
"numerics"}` (or `{"error", "message", "reason"}` for an mleforge error).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import traceback
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

import mleforge
from mleforge import errors
from mleforge.errors import MleforgeError
from mleforge.reference.board import Progress
from mleforge.tasks.task import Task


def build_in_child(
    task: Task, env: Mapping[str, str], progress: Progress | None = None, entries: Collection[str] | None = None
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The board's rows (`entry`, `score`; only the `entries` named, when given) and the
    child's `numerics()`."""
    command = [sys.executable, "-m", "mleforge.reference.pinned", task.id, "--data-dir", str(task.data_dir.parent)]
    if task.kind == "folder":
        command += ["--tasks-dir", str(task.spec.folder)]
    for entry in entries if entries is not None else ():
        command += ["--entry", entry]
    env = dict(env)
    # The child imports this very mleforge, and sees no other task folders.
    package_root = str(Path(mleforge.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH", "")) if p)
    env["MLEFORGE_TASKS"] = ""
    result: dict[str, Any] | None = None
    failure: dict[str, Any] | None = None
    with tempfile.TemporaryFile(mode="w+", encoding="utf-8") as stderr:
        with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=stderr, text=True, env=env) as child:
            for line in child.stdout or ():
                message = json.loads(line)
                if "done" in message and progress is not None:
                    progress(message["done"], message["total"], message["entry"])
                elif "board" in message:
                    result = message
                elif "error" in message:
                    failure = message
            returncode = child.wait()
        stderr.seek(0)
        tail = stderr.read()[-4000:]
    if failure is not None:
        raise _rebuilt_error(failure)
    if returncode != 0 or result is None:
        raise MleforgeError(f"the leaderboard build of {task.id} failed in its child process "
                            f"(exit status {returncode}):\n{tail.strip()}")
    return result["board"], result["numerics"]


def _rebuilt_error(failure: Mapping[str, Any]) -> MleforgeError:
    cls = getattr(errors, str(failure["error"]), None)
    if cls is errors.InvalidSubmission:
        return errors.InvalidSubmission(failure["reason"] or failure["message"])
    if isinstance(cls, type) and issubclass(cls, MleforgeError) and cls not in (errors.TaskSpecError, errors.MissingExtra):
        return cls(failure["message"])
    return MleforgeError(failure["message"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mleforge.reference.pinned")
    parser.add_argument("task")
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--tasks-dir")
    parser.add_argument("--entry", action="append", dest="entries", help="build only this entry (repeatable)")
    args = parser.parse_args(argv)

    from mleforge.reference.board import build_here
    from mleforge.reference.numerics import numerics
    from mleforge.tasks.registry import TaskRegistry

    def say(message: dict[str, Any]) -> None:
        print(json.dumps(message), flush=True)

    try:
        folders = [args.tasks_dir] if args.tasks_dir else []
        registry = TaskRegistry(folders, include_builtin=not folders, data_dir=args.data_dir, mlebench=False)
        board = build_here(registry.get(args.task),
                           progress=lambda done, total, entry: say({"done": done, "total": total, "entry": entry}),
                           entries=args.entries)
        say({"board": board.to_dict(orient="records"), "numerics": numerics()})
        return 0
    except MleforgeError as exc:
        say({"error": type(exc).__name__, "message": str(exc), "reason": getattr(exc, "reason", None)})
        return 1
    except Exception:
        traceback.print_exc()
        return 1


if __name__ == "__main__":
    sys.exit(main())
