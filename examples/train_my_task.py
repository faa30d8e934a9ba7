"""Train on a task of your own: prepare `my_task/` (the wine task, written against
mleforge.tasks.authoring), then run step-wise GRPO on it, the curriculum seeded by the
template expert's journals.

    python examples/train_my_task.py                              # the cpu preset's model: Qwen2.5-Coder-0.5B, LoRA
    python examples/train_my_task.py --model bundled:smollm2-135m --steps 2 --group-size 2
    python examples/train_my_task.py --report-to tensorboard      # then: tensorboard --logdir runs/examples

The same from the shell: mleforge train --tasks-dir examples/my_task --tasks wine --eval-tasks ''
Copy `my_task/` and this script, change the data, the description and the settings.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from mleforge.tasks.preparation import prepare
from mleforge.tasks.registry import TaskRegistry
from mleforge.train.config import TrainConfig
from mleforge.train.recipe import train

HERE = Path(__file__).resolve().parent


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=TrainConfig().model.spec, help="bundled:NAME or hf:PATH")
    parser.add_argument("--steps", type=int, default=4, help="GRPO steps")
    parser.add_argument("--group-size", type=int, default=4, help="rollouts per state")
    parser.add_argument("--max-new-tokens", type=int, default=TrainConfig().max_new_tokens)
    parser.add_argument("--sft", default="none", help="none, or auto: fine-tune on the expert's steps first")
    parser.add_argument("--expert-steps", type=int, default=6, help="steps of the expert episode seeding the buffer")
    parser.add_argument("--report-to", default="none", help="none | tensorboard | wandb | trackio")
    parser.add_argument("--run-dir", default="runs/examples/train-wine", help="where the run goes")
    args = parser.parse_args(argv)

    registry = TaskRegistry(task_dirs=[HERE / "my_task"])  # the built-in suite stays registered too
    task = registry.get("wine")
    print(f"prepared {task.id}: {prepare(task).status} in {task.public_dir}")

    # The cpu preset with this task; every TrainConfig field can be set the same way
    # (a section as a dict: reward={"alpha": 2.0}), or read from a YAML file with --config.
    config = TrainConfig.preset_config(
        "cpu", model={"spec": args.model}, tasks="wine", eval_tasks="", steps=args.steps,
        group_size=args.group_size, max_new_tokens=args.max_new_tokens, warm_start=args.sft,
        report_to=args.report_to, stepwise={"enabled": False}, collect={"steps": args.expert_steps},
    )
    result = train(config, args.run_dir, registry=registry)
    print(f"trained {result.steps} steps in {result.wall_s:.0f} s: model hf:{result.final_model}, "
          f"metrics {Path(result.run_dir) / 'metrics.jsonl'}, report {result.report}")


if __name__ == "__main__":
    main()
