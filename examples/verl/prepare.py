"""Make a verl run directory: python examples/verl/prepare.py RUN_DIR [--config mleforge.yaml].

RUN_DIR gets the mleforge config, the prepared tasks and the seeded state buffer (the
curriculum verl's CurriculumDataset draws from), and RUN_DIR/val/ the held-out tasks'
seed states, exported as RUN_DIR/val.verl.parquet for verl's validation.
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

from mleforge.config import load_yaml
from mleforge.train.config import TrainConfig
from mleforge.train.verl.rows import export_verl
from mleforge.train.verl.run import prepare_run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir")
    parser.add_argument("--config", default=str(Path(__file__).with_name("mleforge.yaml")))
    args = parser.parse_args()
    config = TrainConfig.from_dict(load_yaml(args.config))
    run = prepare_run(config, args.run_dir)
    val = prepare_run(replace(config, tasks=config.eval_tasks, eval_tasks="", journals=None), run.folder / "val")
    n = export_verl(val.folder, run.folder / "val.verl.parquet")
    print(f"{run.folder}: {len(run.tasks)} training tasks; {n} validation states in val.verl.parquet")


if __name__ == "__main__":
    main()
