"""What every command shares: the options of the CLI root, task selection, policy options.

A command module adds `parents=[common()]` to each of its parsers to take the shared
options (`--data-dir`, `--tasks-dir`, `--json`; read as `args.data_dir`, `args.tasks_dir`,
`args.json`), then builds the task registry they name with `task_registry(args)`.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from mleforge.cli.engine_options import add_engine_arguments, engine_options
from mleforge.errors import MleforgeError
from mleforge.sandbox.config import ISOLATION_HELP, ISOLATIONS

POLICY_HELP = "template | openai:<model> | hf:<path> | bundled:smollm2-135m | bundled:qwen2.5-coder-0.5b"


def common() -> argparse.ArgumentParser:
    """The parent parser of every command: the shared options."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--data-dir", help="data root (default $MLEFORGE_DATA or ~/.cache/mleforge/data)")
    common.add_argument("--tasks-dir", action="append", help="a task folder or a folder of task folders (repeatable)")
    common.add_argument("--json", action="store_true", help="print JSON instead of tables")
    return common


def add_config_file(p: argparse.ArgumentParser, help_text: str) -> None:
    """--config FILE: the command's settings from YAML (read as `args.config`; flags win)."""
    p.add_argument("--config", metavar="FILE", help=help_text)


def saved_by_a_run(path: str) -> bool:
    """Is this --config file the config.yaml a run saved (a run record beside it)? Only then
    does a key its version did not write yet read as what that run did."""
    from mleforge.runs import RUN_RECORD

    return (Path(path).parent / RUN_RECORD).is_file()


def task_registry(args: argparse.Namespace):
    """The task registry of the shared options: built-in tasks, `--tasks-dir`, `--data-dir`."""
    from mleforge.tasks.registry import TaskRegistry

    return TaskRegistry(task_dirs=args.tasks_dir or (), data_dir=args.data_dir)


def add_selection(p: argparse.ArgumentParser) -> None:
    """Task ids, or --all, or --lite (read by `selected`)."""
    p.add_argument("ids", nargs="*", help="task ids")
    p.add_argument("--all", action="store_true", help="every registered task")
    p.add_argument("--lite", action="store_true", help="the lite subset")


def selected(args: argparse.Namespace, registry) -> list:
    if getattr(args, "all", False):
        return registry.tasks()
    if getattr(args, "lite", False):
        return registry.select("lite")
    if not args.ids:
        raise MleforgeError("name task ids, or pass --all (or --lite)")
    return [registry.get(i) for i in args.ids]


def add_generation_options(p: argparse.ArgumentParser) -> None:
    """Sampling, local-model threads and the sandbox backend of an agent run."""
    p.add_argument("--temperature", type=float, default=0.7)
    p.add_argument("--max-new-tokens", type=int, default=2048)
    p.add_argument("--threads", type=int, help="torch threads for local models")
    p.add_argument("--executor", default="local", help="sandbox backend (default local)")
    add_isolation_option(p)
    add_engine_arguments(p)  # --engine, --quantization: how a local model generates


def add_isolation_option(p: argparse.ArgumentParser) -> None:
    """--isolation for commands that run scripts (read as `args.isolation`; None: not given)."""
    p.add_argument("--isolation", choices=ISOLATIONS, help=ISOLATION_HELP)


def executor_options(args: argparse.Namespace) -> dict:
    """make_executor's options from --isolation (nothing when not given: the executor reads
    $MLEFORGE_ISOLATION, else auto)."""
    return {"isolation": args.isolation} if getattr(args, "isolation", None) else {}


def add_feedback_option(p: argparse.ArgumentParser) -> None:
    """What the agent is shown of its own submissions (the final grade is always private)."""
    p.add_argument("--feedback", choices=("public", "none"), default="public",
                   help="public: each submission's score on the public part of the test answers, in "
                        "prompts and for the search's choices; none: execution output only, as in "
                        "MLE-bench (default public)")


def policy_options(args: argparse.Namespace, registry) -> dict:
    """Options for make_policy: the template expert reads tasks from the same registry;
    local models use one torch thread per core share."""
    prefix = args.policy.partition(":")[0]
    options = engine_options(args, args.policy)  # refuses --engine for a policy without engines
    if prefix == "template":
        return {"registry": registry, **options}
    if prefix in ("hf", "bundled") and args.threads:
        return {"num_threads": args.threads, **options}
    return options
