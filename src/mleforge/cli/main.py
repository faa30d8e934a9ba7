"""`mleforge`: machine-learning engineering tasks, grading, agent runs, evaluation and training data."""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from mleforge.cli.output import err_console
from mleforge.errors import MleforgeError

# The command groups, in the order `mleforge --help` lists them. Each module has
# `register(subparsers)`, which adds its parsers with `set_defaults(func=handler)`,
# `handler(args) -> int`; a new group is one more name here.
COMMANDS = ("tasks", "grade", "exec", "run", "buffer", "eval", "collect", "sft", "train")


def build_parser() -> argparse.ArgumentParser:
    from mleforge import __version__

    parser = argparse.ArgumentParser(prog="mleforge", description=__doc__)
    parser.add_argument("--version", action="version", version=f"mleforge {__version__}")
    # A command that does not take the shared options (options.common) still reads them as unset.
    parser.set_defaults(data_dir=None, tasks_dir=None, json=False)
    sub = parser.add_subparsers(dest="command", required=True)
    for name in COMMANDS:
        importlib.import_module(f"mleforge.cli.{name}").register(sub)
    return parser


# OpenMP's idle threads sleep instead of spinning, unless the user chose otherwise. Set before
# torch or ctranslate2 load (nothing above imports them). On a busy CPU spinning threads starve
# the working ones, and the trainer's executor and other jobs share the cores with torch
# (`python benchmarks/train_step.py` beside a busy process shows it); the expert's scripts set it
# for the same reason.
OMP_WAIT_POLICY = "PASSIVE"


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("OMP_WAIT_POLICY", OMP_WAIT_POLICY)
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except MleforgeError as exc:
        from rich.markup import escape

        from mleforge.cli.output import terminal_safe

        # escaped: a message's "pip install 'mleforge[fast]'" is text, not a rich style tag; and
        # terminal-safe: a sandbox error quotes what a script wrote to stderr
        err_console.print(f"[bold red]error:[/] {escape(terminal_safe(str(exc)))}", highlight=False)
        return 2


if __name__ == "__main__":
    sys.exit(main())
