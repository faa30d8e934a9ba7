"""`mleforge train`: step-wise GRPO on the evolving curriculum (the main job).

With no arguments it trains the bundled Qwen2.5-Coder-0.5B with LoRA on a CPU on the lite
tasks (the `cpu` preset) and ends by printing where its report is. Every value is checked
before anything heavy starts.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from mleforge.cli.engine_options import add_engine_arguments
from mleforge.cli.options import (
    PROMPT_GRAD_HELP,
    add_isolation_option,
    common,
    lora_layers_arg,
    on_off,
)
from mleforge.cli.output import err_console, print_json, print_table
from mleforge.policies.engines.base import QUANTIZATIONS

# flag -> (TrainConfig field, or "model.<field>")
FLAGS = {
    "model": "model.spec", "tasks": "tasks", "eval_tasks": "eval_tasks", "steps": "steps",
    "group_size": "group_size", "groups_per_step": "groups_per_step", "max_new_tokens": "max_new_tokens",
    "lr": "lr", "lora_rank": "model.lora_rank", "sampler": "sampler", "sft": "sft", "seed": "seed",
    "journals": "journals", "executor": "executor", "isolation": "isolation", "feedback": "feedback", "generation": "generation", "threads": "model.threads",
    "exec_workers": "exec_workers", "micro_batch": "micro_batch", "sft_steps": "sft_steps", "sft_lr": "sft_lr",
    "temperature": "temperature", "sft_max_length": "sft_max_length", "sft_loss_samples": "sft_loss_samples",
    "expert_steps": "expert_steps", "stepwise_expert_steps": "stepwise_expert_steps", "stepwise_states": "stepwise_states", "quantization": "quantization",
    "rollout_quantization": "rollout_quantization", "sync_every": "sync_every",
    "eval_after_sft": "stepwise_after_sft",
}


def register(subparsers) -> None:
    p = subparsers.add_parser("train", parents=[common()],
                              help="step-wise GRPO on the evolving curriculum (the main job)")
    p.add_argument("--preset", choices=("cpu", "gpu-1x"), default="cpu",
                   help="cpu (default: bundled Qwen-0.5B, LoRA, lite tasks, short edit-block steps) | gpu-1x "
                        "(bf16, 8 x 8 rollouts a step, 1,024-token completions, vLLM where installed)")
    p.add_argument("--model", help="bundled:NAME | hf:PATH (default: the preset's, bundled:qwen2.5-coder-0.5b)")
    p.add_argument("--tasks", help="tasks to train on: lite | all | id,id,... (default lite)")
    p.add_argument("--eval-tasks", help="tasks of the step-wise evaluation, not trained on ('' for none)")
    p.add_argument("--steps", type=int, help="GRPO steps")
    p.add_argument("--group-size", type=int, help="rollouts per state (GRPO's G; at least 2)")
    p.add_argument("--groups-per-step", type=int, help="states per step")
    p.add_argument("--micro-batch", type=int, help="sequences per forward/backward pass")
    p.add_argument("--max-new-tokens", type=int, help="completion length cap")
    p.add_argument("--lr", type=float, help="learning rate")
    p.add_argument("--lora-rank", type=int, help="LoRA rank")
    p.add_argument("--lora-layers", type=lora_layers_arg, metavar="N|all",
                   help="put the adapter on the last N decoder layers only (a shorter backward pass), or on all "
                        "(default all)")
    p.add_argument("--full", action="store_true", help="train every weight instead of a LoRA adapter")
    p.add_argument("--prompt-grad", type=on_off, metavar="on|off", help=PROMPT_GRAD_HELP)
    p.add_argument("--sampler", choices=("uniform", "learnability"), help="curriculum sampler (default learnability)")
    p.add_argument("--no-buffer-growth", action="store_true",
                   help="ablation: rollouts update statistics but add no states (the buffer stays its seeds)")
    p.add_argument("--sft", help="warm start: auto (collect with the template expert, fine-tune briefly; the "
                                 "default) | none | PATH (an `mleforge sft` run or its model/)")
    p.add_argument("--journals", help="a folder of collected runs whose journals seed the buffer (default: the "
                                      "template expert makes them)")
    p.add_argument("--executor", choices=("auto", "local", "pool", "ray"),
                   help="sandbox backend (default auto: the warm pool as root, else local)")
    add_isolation_option(p)
    p.add_argument("--feedback", choices=("public", "none"),
                   help="what the states' prompts show of earlier runs: public (the public score, default) or "
                        "none (execution output only); the reward is the public score either way")
    p.add_argument("--exec-workers", type=int, help="rollouts executed at once (default: CPUs / task CPUs)")
    p.add_argument("--generation", help="what samples the GRPO rollouts: trl (TRL's own generate) | vllm (TRL's, "
                                        "on a GPU) | ct2 (CTranslate2, the trained weights synced each step, a "
                                        "group's prompt prefilled once; pip install 'mleforge[fast]') | auto "
                                        "(the default: ct2 on a CPU where ctranslate2 is installed and converts "
                                        "the model, vllm on a GPU where installed, else trl)")
    p.add_argument("--rollout-quantization", choices=QUANTIZATIONS,
                   help="--generation ct2's weight type (default: the training weights' own, float32 on a CPU; "
                        "TRL corrects other weights' samples only on its vLLM path: int8 is faster but biased)")
    p.add_argument("--sync-every", type=int, help="--generation ct2 takes the trained weights every this many "
                                                  "steps (default 1; staleness is logged in metrics.jsonl)")
    p.add_argument("--threads", type=int, help="torch CPU threads")
    p.add_argument("--run-dir", help="run directory (default runs/train/<model>-<preset>-seed<seed>)")
    p.add_argument("--resume", metavar="RUN", help="continue the run in RUN from its last checkpoint (its own "
                                                   "config; no other setting may be given)")
    p.add_argument("--seed", type=int, help="seed of every random choice (default 0)")
    p.add_argument("--sft-steps", type=int, help="optimizer steps of the --sft auto warm start (default 22)")
    p.add_argument("--sft-lr", type=float, help="learning rate of the --sft auto warm start (default 2e-4)")
    p.add_argument("--temperature", type=float, help="sampling temperature of the GRPO rollouts")
    p.add_argument("--sft-max-length", type=int, help="token cap of a warm-start sample (default 4096)")
    p.add_argument("--sft-loss-samples", type=int, help="warm-start samples its loss before and after is "
                                                        "measured on (default 4)")
    p.add_argument("--expert-steps", type=int, help="steps of each template-expert episode of the training tasks "
                                                    "(seeds, warm start; default 6)")
    p.add_argument("--stepwise-expert-steps", type=int, help="steps of each template-expert episode of the eval "
                                                             "tasks (the step-wise states; default 6)")
    p.add_argument("--stepwise-states", type=int, help="states of the step-wise evaluation before and after "
                                                       "(default 8)")
    p.add_argument("--eval-after-sft", type=on_off, metavar="on|off",
                   help="also evaluate the warm start's model on the step-wise states, between before and "
                        "after (default off on the cpu preset, where it adds 2.5-4 minutes; on for gpu-1x)")
    add_engine_arguments(p)  # the step-wise evaluation's generation; GRPO rollouts: --generation
    p.set_defaults(func=cmd_train)


def overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The TrainConfig overrides the flags give (model fields under "model")."""
    out: dict[str, Any] = {}
    model: dict[str, Any] = {}
    for flag, key in FLAGS.items():
        value = getattr(args, flag, None)
        if value is None:
            continue
        if key.startswith("model."):
            model[key.removeprefix("model.")] = value
        else:
            out[key] = value
    if args.full:
        model["full"] = True
    if getattr(args, "lora_layers", None) is not None:
        model["lora_layers"] = None if args.lora_layers == "all" else args.lora_layers
    if getattr(args, "prompt_grad", None) is not None:
        model["prompt_grad"] = args.prompt_grad
    if args.no_buffer_growth:
        out["buffer_growth"] = False
    if getattr(args, "engine", "auto") != "auto":  # auto is the default: not an override
        out["engine"] = args.engine
    if model:
        out["model"] = model
    return out


def _registry(args: argparse.Namespace):
    from mleforge.tasks.registry import TaskRegistry

    return TaskRegistry(task_dirs=getattr(args, "tasks_dir", None) or (), data_dir=getattr(args, "data_dir", None))


def cmd_train(args: argparse.Namespace) -> int:
    from mleforge.train.config import TrainConfig
    from mleforge.train.errors import TrainError
    from mleforge.train.recipe import resume, train

    as_json = getattr(args, "json", False)
    given = overrides(args)
    if args.resume:
        if given or args.run_dir or args.preset != "cpu":
            raise TrainError(f"--resume {args.resume} continues that run with its own config.yaml; drop the other "
                             "settings (" + ", ".join(sorted(set(given) | ({"run_dir"} if args.run_dir else set())))
                             + ")")
        result = resume(args.resume, registry=_registry(args), progress=not as_json, console=err_console)
    else:
        config = TrainConfig.preset_config(args.preset, **given)
        result = train(config, args.run_dir, registry=_registry(args), progress=not as_json,
                       console=err_console)
    if as_json:
        print_json(result.to_dict())
        return 0
    print_table("train", ["run", "steps", "final model", "wall s"],
                [[result.run_dir, result.steps, f"hf:{result.final_model}", result.wall_s]])
    from mleforge.eval.stages import stepwise_table

    table = stepwise_table(Path(result.run_dir))
    if table is not None:
        columns, rows = table
        print_table("step-wise evaluation on the eval tasks (mean ± SEM over states)", list(columns),
                    [list(r) for r in rows])
    err_console.print(f"report: {result.report}  (mleforge report {result.run_dir})", highlight=False)
    return 0
