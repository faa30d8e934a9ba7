"""Experiment tracking: where a run's curves go besides its metrics.jsonl.

`report_to` (TrainConfig and SFTRunConfig, the flag `--report-to`) names a tracker that
transformers integrates: tensorboard, wandb or trackio, or none. It is handed to TRL's
config as `report_to`, so TRL's own figures (loss, KL, its reward columns) go there; on
`mleforge train`, each step's mleforge figures (the StepMetrics line of metrics.jsonl: reward
and its components, the outcome rates, tied groups, buffer size, timings) go there too,
under `mleforge/`, at the same step as TRL's. TensorBoard writes its event files into the
run directory's `tensorboard/` folder; wandb and trackio keep their own stores (their
environment variables, such as WANDB_MODE=offline, apply).

Each tracker is a package of its own: a missing one is refused before a model loads, with
the extra that installs it.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mleforge.errors import MissingExtra

TRACKERS = ("none", "tensorboard", "wandb", "trackio")
# tracker -> (the package it needs, the extra of mleforge that installs it)
PACKAGES = {"tensorboard": ("tensorboard", "tracking"), "wandb": ("wandb", "wandb"), "trackio": ("trackio", "trackio")}
TENSORBOARD_DIR = "tensorboard"
PREFIX = "mleforge/"
PROJECT = "mleforge"  # trackio's project (wandb reads WANDB_PROJECT)


def require_tracker(report_to: str, purpose: str) -> None:
    """Raise MissingExtra, naming the extra, unless `report_to`'s package is installed."""
    if report_to == "none":
        return
    package, extra = PACKAGES[report_to]
    if importlib.util.find_spec(package) is None:
        raise MissingExtra(package, extra, f"{purpose} --report-to {report_to}")


def trainer_args(report_to: str, run_dir: Path) -> dict[str, Any]:
    """The TrainingArguments (GRPOConfig, SFTConfig) settings of a run's tracking."""
    return {"report_to": report_to, "run_name": Path(run_dir).name, "project": PROJECT}


def attach(trainer: Any, run_dir: Path) -> None:
    """Point the trainer's TensorBoard callback, if it has one, at <run_dir>/tensorboard
    (transformers' default is a dated folder under the checkpoints)."""
    from transformers.integrations import TensorBoardCallback

    for callback in trainer.callback_handler.callbacks:
        if isinstance(callback, TensorBoardCallback) and callback.logging_dir is None:
            callback.logging_dir = str(Path(run_dir) / TENSORBOARD_DIR)


def scalars(metrics: Mapping[str, Any]) -> dict[str, float]:
    """A metrics line's figures as tracker scalars: `mleforge/<name>`, the numbers only (a
    figure a step has none of, such as the reward of a step whose rollouts were all lost, is
    left out rather than logged as a value it does not have); the step is the tracker's own."""
    return {PREFIX + key: float(value) for key, value in metrics.items()
            if key != "step" and isinstance(value, (int, float)) and not isinstance(value, bool)}


def log_step(trainer: Any, metrics: Mapping[str, Any]) -> None:
    """Send one step's figures to the trainer's trackers (its integration callbacks' on_log),
    at the trainer's global step. Nothing goes to the trainer's log history, so checkpoints
    are what they would be without tracking."""
    if not trainer.args.report_to:  # transformers reads "none" as []
        return
    trainer.callback_handler.on_log(trainer.args, trainer.state, trainer.control, scalars(metrics))
