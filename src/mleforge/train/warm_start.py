"""The warm start of `mleforge train`: the model GRPO starts from.

    --sft none    the model as given
    --sft PATH    an `mleforge sft` run (or its model/)
    --sft auto    `mleforge collect` with the template expert on the training tasks in <run>/collect,
                  then `mleforge sft` on its samples in <run>/sft; done once (a resumed run finds
                  both finished), and the collection's journals seed the buffer too; in a launch
                  of several processes the main process runs the SFT as a process of its own
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import yaml
from rich.console import Console

from mleforge.runs import COLLECT_DIR, SFT_DIR
from mleforge.train.config import SFTRunConfig, TrainConfig
from mleforge.train.errors import TrainError

if TYPE_CHECKING:
    from mleforge.expert.collect import CollectResult
    from mleforge.expert.collect_config import CollectConfig
    from mleforge.sandbox import Executor
    from mleforge.tasks.registry import TaskRegistry
    from mleforge.tasks.task import Task
    from mleforge.train.plan import Plan
    from mleforge.train.sft import SFTResult


def sft_model_folder(path: str) -> Path:
    """The model folder of `--sft PATH`: an `mleforge sft` run directory or its model/."""
    folder = Path(path).expanduser().resolve()
    if (folder / "model").is_dir() and not (folder / "adapter_config.json").exists():
        folder = folder / "model"
    return folder


def collect_config(config: TrainConfig, tasks: Sequence[Task]) -> CollectConfig:
    """The `mleforge collect` of --sft auto: the template expert on the training tasks, its
    samples rendered with the run's prompt (refused where the run's PromptConfig is not a
    profile collect can render: the warm start must see the prompts GRPO will)."""
    from mleforge.agent.prompt_config import PromptConfig

    profile, code_chars = config.prompt.profile, config.prompt.code_chars
    if PromptConfig.for_profile(profile, code_chars=code_chars) != config.prompt:
        raise TrainError(f"--sft auto renders its samples with the {profile} prompt profile, and this run's prompt "
                         f"config changes that profile's budgets beyond code_chars; use the profile's own "
                         f"budgets (PromptConfig.for_profile), or collect yourself and pass --sft PATH")
    sandbox = config.sandbox
    return replace(config.collect, tasks=",".join(t.id for t in tasks), first_seed=config.seed,
                   executor=sandbox.executor if sandbox.executor in ("local", "pool") else "local",
                   isolation=sandbox.isolation, prompt_profile=profile, code_chars=code_chars)


def collect_expert(plan: Plan, folder: Path, registry: TaskRegistry, executor: Executor, progress: bool,
                   console: Console | None = None) -> CollectResult:
    """--sft auto's collect in <run>/collect (resumed: finished episodes are read back)."""
    from mleforge.expert.collect import collect_samples

    return collect_samples(collect_config(plan.config, plan.tasks), folder / COLLECT_DIR, registry=registry,
                           executor=executor, progress=progress, console=console)


def sft_done(folder: Path) -> SFTResult | None:
    """The finished warm start of --sft auto in <run>/sft, or None."""
    from mleforge.train.sft import finished_sft

    return finished_sft(folder / SFT_DIR)


def warm_start(plan: Plan, folder: Path, collected: CollectResult | None, progress: bool,
               console: Console | None = None, *, apart: bool = False) -> str:
    """The spec of the model GRPO starts from: --sft none, PATH, or auto (SFT on `collected`,
    done once: a resumed run finds sft/ finished). auto fine-tunes on the samples of the
    stages GRPO trains on (`seed_stages`): on the cpu preset the short debug and improve
    edits, not the whole-script drafts that are 10x longer than its completion cap. `apart`: the
    SFT runs in a process of its own (`run_sft_apart`: the main process of a multi-process run)."""
    config = plan.config
    if config.warm_start_mode == "none":
        return config.model.spec
    if config.warm_start_mode == "path":
        return f"hf:{sft_model_folder(config.warm_start)}"
    done = sft_done(folder)
    if done is not None:
        return f"hf:{done.model_dir}"
    from mleforge.train.sft import run_sft

    assert collected is not None  # auto collects whenever its warm start is not done
    if not collected.counts.get("samples"):
        raise TrainError(f"--sft auto: the template expert's episodes in {collected.out_dir} gave no sample "
                         f"(left out: {collected.counts.get('left_out')}); raise collect.episodes or collect.steps, or "
                         "pass --sft none")
    sft = SFTRunConfig(samples=collected.samples_path, out=str(folder / SFT_DIR), model=config.model,
                       stages=config.seed_stages, seed=config.seed, sft=config.sft,
                       report_to=config.report_to)
    result = run_sft_apart(sft) if apart else run_sft(sft, progress=progress, console=console)
    return f"hf:{result.model_dir}"


# What torchrun (under `accelerate launch`) tells a rank about its launch.
LAUNCH_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
                    "ROLE_RANK", "ROLE_NAME", "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def solo_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """`environ` without what makes a process one rank of a launch."""
    return {k: v for k, v in environ.items() if k not in LAUNCH_VARIABLES and not k.startswith("TORCHELASTIC_")}


def run_sft_apart(config: SFTRunConfig) -> SFTResult:
    """`mleforge sft` on `config` in a process of its own, outside the launch: how the main
    process of a multi-process run makes --sft auto's warm start while the other ranks wait (a
    transformers Trainer started in one rank of a launch would wait for the others' DDP).
    Its progress goes to this process's stderr."""
    from mleforge.train.sft import finished_sft

    out = Path(config.out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="mleforge-sft-") as scratch:
        file = Path(scratch) / "sft.yaml"
        file.write_text(yaml.safe_dump(config.to_dict(), sort_keys=False), encoding="utf-8")
        command = [sys.executable, "-m", "mleforge", "sft", "--config", str(file)]
        code = subprocess.run(command, env=solo_environment(os.environ), stdout=2, check=False).returncode
    done = finished_sft(out)
    if code != 0 or done is None:
        raise TrainError(f"the warm start's SFT ({' '.join(command[1:4])} into {out}) ended with exit code {code}; "
                         "its output is above")
    return done
