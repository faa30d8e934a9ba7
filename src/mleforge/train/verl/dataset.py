"""The curriculum as verl's dataset (`data.custom_cls`): every prompt is the buffer owner's draw.

    data.custom_cls.path=pkg://mleforge.train.verl.dataset
    data.custom_cls.name=CurriculumDataset
    data.train_files=RUN_DIR        # a run directory: the curriculum
    data.val_files=VAL.parquet      # a parquet file: read as verl's RLHFDataset reads it

verl builds its train and validation sets with the same class (verl/trainer/ppo/utils.py:
create_rl_dataset), so this one is verl's RLHFDataset for parquet files and the curriculum
for a run directory. There, `__getitem__` ignores the index verl's sampler gives (verl
iterates a map-style dataset with a sequential or random sampler; a curriculum is neither)
and returns the owner's next row (mleforge.train.verl.owner), in RLHFDataset's item format.
Its length is the run's `steps` x `groups_per_step` (one verl epoch is the whole run), and
verl's `data.train_batch_size` must be the run's `groups_per_step` (a round is one step).
Keep `data.dataloader_num_workers=0`: the rows come from the owner, not from this process's
work, and a worker process would prefetch draws before the step they belong to is sealed.

This module imports verl: verl loads it; nothing else in mleforge imports it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from verl.utils.dataset.rl_dataset import RLHFDataset

from mleforge.curriculum.schema import BUFFER_FILE
from mleforge.train.errors import TrainError
from mleforge.train.verl.run import VerlRun


def run_folder(data_files: Any) -> Path | None:
    """The run directory `data_files` names, or None for data files (parquet, json)."""
    files = [data_files] if isinstance(data_files, str | Path) else list(data_files)
    folders = [Path(f) for f in files if (Path(f) / BUFFER_FILE).is_file()]
    if not folders:
        return None
    if len(files) != 1:
        raise TrainError(f"data files {files}: give one mleforge run directory, or only data files")
    return folders[0].resolve()


class CurriculumDataset(RLHFDataset):
    """verl's RLHFDataset, drawing from the curriculum when given a run directory."""

    def __init__(self, data_files: Any, tokenizer: Any, config: Any, processor: Any = None, max_samples: int = -1,
                 owner: Any = None):
        folder = run_folder(data_files)
        self.folder = folder
        if folder is None:
            super().__init__(data_files, tokenizer, config, processor=processor, max_samples=max_samples)
            return
        self.tokenizer, self.processor, self.config = tokenizer, processor, config
        self.prompt_key = config.get("prompt_key", "prompt")
        run = VerlRun.load(folder)
        groups = int(config.get("train_batch_size", run.config.groups_per_step))
        if groups != run.config.groups_per_step:
            raise TrainError(f"data.train_batch_size is {groups}, but the run {folder} draws "
                             f"{run.config.groups_per_step} states a step (groups_per_step); set them equal")
        if int(config.get("dataloader_num_workers", 0) or 0) != 0:
            raise TrainError("data.dataloader_num_workers must be 0 with the curriculum: a worker process "
                             "would draw prompts before the previous step's rewards are in")
        self.length = run.config.steps * groups if max_samples is None or max_samples <= 0 else int(max_samples)
        if owner is None:
            from mleforge.train.verl.owner import owner_handle

            owner = owner_handle(folder, groups)
        self.owner = owner

    def __len__(self) -> int:
        return self.length if self.folder is not None else super().__len__()

    def __getitem__(self, item: int) -> dict[str, Any]:
        if self.folder is None:
            return super().__getitem__(item)
        row = self._next_row()
        return {
            **row,
            "raw_prompt": row[self.prompt_key],
            "dummy_tensor": torch.tensor([0], dtype=torch.uint8),  # as RLHFDataset: DataProto needs a tensor
            "index": row["extra_info"]["index"],
            "tools_kwargs": {},
            "interaction_kwargs": {},
        }

    def _next_row(self) -> dict[str, Any]:
        next_row = self.owner.next_row
        if hasattr(next_row, "remote"):  # the Ray actor
            import ray

            return ray.get(next_row.remote())
        return next_row()  # a BufferOwner in this process
