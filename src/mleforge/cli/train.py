"""`mleforge train`: step-wise GRPO on the evolving curriculum (the main job).

With no arguments it trains the bundled Qwen2.5-Coder-0.5B with LoRA on a CPU on the lite
tasks (the `cpu` preset) and ends by printing where its report is. Every TrainConfig setting is
a flag generated from its field (`--steps 8`, `--reward.alpha 2`, `--buffer.max-states 500`),
and `--config FILE` reads them from YAML. Every value is checked before anything heavy starts.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from mleforge import config as tree
from mleforge.cli.options import add_config_file, common, saved_by_a_run
from mleforge.cli.output import err_console, print_json, print_table
from mleforge.errors import ConfigError
from mleforge.train.config import TrainConfig, upgrade_train_dict


def register(subparsers) -> None:
    p = subparsers.add_parser("train", parents=[common()],
                              help="step-wise GRPO on the evolving curriculum (the main job)")
    add_config_file(p, "a TrainConfig YAML file (a run's config.yaml reproduces that run); the preset under "
                       "it, flags over it")
    p.add_argument("--run-dir", help="run directory (default runs/train/<model>-<preset>-seed<seed>)")
    p.add_argument("--resume", metavar="RUN", help="continue the run in RUN from its last checkpoint (its own "
                                                   "config; no other setting may be given)")
    tree.add_arguments(p, TrainConfig)  # every setting: --steps, --reward.alpha 2, --buffer.max-states 500
    p.set_defaults(func=cmd_train)


def overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The TrainConfig settings the flags give, as a nested dict."""
    return tree.given(args)


def train_config(args: argparse.Namespace) -> TrainConfig:
    """The dataclass defaults < the preset < `--config FILE` < the flags given. A run's own
    config.yaml sets every field, so a --preset other than its own would change nothing but the
    name it is recorded under: refused."""
    file: dict[str, Any] = {}
    saved = bool(getattr(args, "config", None)) and saved_by_a_run(args.config)
    if getattr(args, "config", None):
        file = upgrade_train_dict(tree.load_yaml(args.config), legacy=saved)
    flags = overrides(args)
    if saved and "preset" in flags and file.get("preset", flags["preset"]) != flags["preset"]:
        raise ConfigError(f"--config {args.config} is the config of a run with preset {file['preset']}, and it "
                          f"sets every field: drop --preset {flags['preset']} (or copy the file and edit it)")
    name = flags.get("preset") or file.get("preset") or "cpu"
    return TrainConfig.preset_config(name, **tree.merge(file, flags))


def _registry(args: argparse.Namespace):
    from mleforge.tasks.registry import TaskRegistry

    return TaskRegistry(task_dirs=getattr(args, "tasks_dir", None) or (), data_dir=getattr(args, "data_dir", None))


def cmd_train(args: argparse.Namespace) -> int:
    from mleforge.train.errors import TrainError
    from mleforge.train.recipe import resume, train

    as_json = getattr(args, "json", False)
    if args.resume:
        others = tree.changed_paths({}, overrides(args)) + [name for name in ("run_dir", "config")
                                                            if getattr(args, name, None)]
        if others:
            raise TrainError(f"--resume {args.resume} continues that run with its own config.yaml; drop the other "
                             f"settings ({', '.join(sorted(others))})")
        result = resume(args.resume, registry=_registry(args), progress=not as_json, console=err_console)
    else:
        config = train_config(args)
        result = train(config, args.run_dir, registry=_registry(args), progress=not as_json, console=err_console)
    if result.rank:  # launched as several processes: the main process reports
        return 0
    if as_json:
        print_json(result.to_dict())
        return 0
    print_table("train", ["run", "steps", "final model", "wall s"],
                [[result.run_dir, result.steps, f"hf:{result.final_model}", result.wall_s]])
    _print_stepwise(Path(result.run_dir))
    err_console.print(f"report: {result.report}  (mleforge report {result.run_dir})", highlight=False)
    return 0


def _print_stepwise(run_dir: Path) -> None:
    """The run's step-wise evaluations side by side, then each paired difference with its 95% CI."""
    from mleforge.errors import ConfigError
    from mleforge.eval.stages import stepwise_stages
    from mleforge.eval.stepwise_compare import comparison_caption, comparison_rows
    from mleforge.eval.stepwise_report import stage_comparisons, stages_table

    stages = stepwise_stages(run_dir)
    if stages is None:
        return
    columns, rows = stages_table(stages)
    print_table("step-wise evaluation on the eval tasks (mean ± SEM over states with headroom)", list(columns),
                [list(r) for r in rows])
    try:
        comparisons = stage_comparisons(stages)
    except ConfigError as exc:  # evaluations of another version of the run, on other states
        err_console.print(f"no paired comparison: {exc}", highlight=False)
        return
    for comparison in comparisons:
        columns, rows = comparison_rows(comparison)
        print_table(comparison_caption(comparison), list(columns), [list(r) for r in rows])
