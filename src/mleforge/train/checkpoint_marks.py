"""A run's checkpoints: which one is complete, and the marker that makes it so.

transformers writes `checkpoint-<step>/` piece by piece (weights, optimizer, scheduler, RNG
states, trainer state) with no rename at the end, so a run killed while saving leaves a
folder that looks like a checkpoint and is not one. After the trainer has saved every piece,
`checkpoint_callback` writes `mleforge_checkpoint.json` into the folder, last; only folders
holding it count (`last_checkpoint`). It also writes the model marker and the run record
beside the weights, so `hf:<run>/checkpoints/checkpoint-<step>` loads and is guarded against
contamination like the final model. In a launch of several processes the main process writes
the mark once every rank has saved its part.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mleforge.policies.model_source import write_marker
from mleforge.runs import CHECKPOINT_RECORD
from mleforge.utils.atomic import atomic_write

MARK = "mleforge_checkpoint.json"
PREFIX = "checkpoint-"
_STEP = re.compile(rf"^{PREFIX}(\d+)$")


def checkpoints(folder: str | Path) -> list[tuple[int, Path, bool]]:
    """(step, path, complete) of every checkpoint folder under `folder`, by step."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    found = []
    for path in folder.iterdir():
        match = _STEP.match(path.name)
        if match and path.is_dir():
            found.append((int(match.group(1)), path, (path / MARK).is_file()))
    return sorted(found)


def last_checkpoint(folder: str | Path) -> Path | None:
    """The complete checkpoint of the highest step, or None."""
    complete = [path for _, path, done in checkpoints(folder) if done]
    return complete[-1] if complete else None


def read_mark(checkpoint: str | Path) -> dict[str, Any]:
    return json.loads((Path(checkpoint) / MARK).read_text(encoding="utf-8"))


def discard_after(folder: str | Path, step: int) -> list[Path]:
    """Delete the checkpoint folders past `step` and the incomplete ones (a resume from
    `step` makes them again); what was deleted."""
    gone = []
    for at, path, done in checkpoints(folder):
        if at > step or not done:
            shutil.rmtree(path, ignore_errors=True)
            gone.append(path)
    return gone


def checkpoint_callback(*, full: bool, base_spec: str, run_record: dict[str, Any],
                        state: Callable[[Any], dict[str, Any]] | None = None) -> Any:
    """A TrainerCallback that completes each checkpoint (see the module docstring);
    `state(trainer_state)` adds what else the checkpoint must remember (the buffer's step)."""
    from transformers import TrainerCallback

    class CompleteCheckpoint(TrainerCallback):
        def on_save(self, args, trainer_state, control, **kwargs):
            from accelerate import PartialState

            PartialState().wait_for_everyone()  # every rank's part (its RNG state) is written before the mark
            if not trainer_state.is_world_process_zero:
                return
            folder = Path(args.output_dir) / f"{PREFIX}{trainer_state.global_step}"
            if not folder.is_dir():
                return
            write_marker(folder, weights="full" if full else "adapter", base=base_spec)
            (folder / CHECKPOINT_RECORD).write_text(json.dumps(run_record, indent=1), encoding="utf-8")
            mark = {"global_step": trainer_state.global_step, **(state(trainer_state) if state else {})}
            atomic_write(folder / MARK, json.dumps(mark, indent=1))  # last: the folder is complete

    return CompleteCheckpoint()
