"""`mleforge sft`: fine-tune a model on expert samples (what `mleforge collect` writes).

Every SFTRunConfig setting is a flag generated from its field (`--samples`, `--model`, `--lr`,
`--max-steps`, `--model.lora-alpha 32`), and `--config FILE` reads them from YAML (a run's
config.yaml is one); flags win over the file.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from mleforge import config as tree
from mleforge.cli.options import add_config_file, common, saved_by_a_run
from mleforge.cli.output import err_console, print_json, print_table
from mleforge.train.config import ModelConfig, SFTRunConfig, upgrade_sft_run_dict


def register(subparsers) -> None:
    p = subparsers.add_parser("sft", parents=[common()],
                              help="fine-tune a model on expert samples (TRL SFT; LoRA by default)")
    add_config_file(p, "an SFTRunConfig YAML file (a run's config.yaml); flags over it")
    tree.add_arguments(p, SFTRunConfig)
    p.set_defaults(func=cmd_sft)


def sft_config(args: argparse.Namespace) -> SFTRunConfig:
    """The dataclass defaults < `--config FILE` < the flags given; out defaults to runs/sft/<model>."""
    file: dict = {}
    if getattr(args, "config", None):
        file = upgrade_sft_run_dict(tree.load_yaml(args.config), legacy=saved_by_a_run(args.config))
    data = tree.merge(file, tree.given(args))
    if not data.get("out"):
        spec = (data.get("model") or {}).get("spec", ModelConfig().spec)
        data["out"] = str(Path("runs/sft") / spec.replace("/", "_").replace(":", "-"))
    return SFTRunConfig.from_dict(data)


def cmd_sft(args: argparse.Namespace) -> int:
    from mleforge.train.sft import run_sft

    config = sft_config(args)
    as_json = getattr(args, "json", False)
    result = run_sft(config, progress=not as_json, console=err_console)
    if as_json:
        print_json(result.to_dict())
        return 0
    print_table(f"sft {config.model.spec}", ["samples", "left out (too long)", "steps", "loss before", "loss after",
                                             "wall s"],
                [[result.samples, result.dropped_long, result.steps, round(result.loss_before, 4),
                  round(result.loss_after, 4), result.wall_s]])
    err_console.print(f"model: hf:{result.model_dir}  (mleforge train --sft {result.model_dir})", highlight=False)
    return 0
