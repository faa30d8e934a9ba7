"""`mleforge sft`: fine-tune a model on expert samples (what `mleforge collect` writes)."""

from __future__ import annotations

import argparse
from pathlib import Path

from mleforge.cli.options import PROMPT_GRAD_HELP, common, lora_layers_arg, on_off
from mleforge.cli.output import err_console, print_json, print_table


def register(subparsers) -> None:
    p = subparsers.add_parser("sft", parents=[common()],
                              help="fine-tune a model on expert samples (TRL SFT; LoRA by default)")
    p.add_argument("--samples", required=True, help="a samples JSONL file, or a folder of them (mleforge collect)")
    p.add_argument("--model", default="bundled:qwen2.5-coder-0.5b", help="bundled:NAME | hf:PATH (default %(default)s)")
    p.add_argument("--out", help="run directory (default runs/sft/<model>; the same command again resumes it)")
    p.add_argument("--full", action="store_true", help="train every weight instead of a LoRA adapter")
    p.add_argument("--lora-rank", type=int, default=16, help="LoRA rank (default %(default)s)")
    p.add_argument("--lora-layers", type=lora_layers_arg, default="all", metavar="N|all",
                   help="put the adapter on the last N decoder layers only (a shorter backward pass), or on all "
                        "(default %(default)s)")
    p.add_argument("--prompt-grad", type=on_off, metavar="on|off", help=PROMPT_GRAD_HELP)
    p.add_argument("--epochs", type=float, default=2.0, help="passes over the samples (default %(default)s)")
    p.add_argument("--max-steps", type=int, help="stop after this many optimizer steps (overrides --epochs)")
    p.add_argument("--lr", type=float, default=1e-4, help="learning rate (default %(default)s; 2e-5 for --full)")
    p.add_argument("--batch-size", type=int, default=2, help="samples per forward pass (default %(default)s)")
    p.add_argument("--grad-accum", type=int, default=4, help="forward passes per optimizer step (default %(default)s)")
    p.add_argument("--max-length", type=int, default=4096,
                   help="prompt + completion tokens; longer samples are left out (default %(default)s)")
    p.add_argument("--loss-samples", type=int, default=32,
                   help="samples the loss before and after is measured on (a seeded subset; default %(default)s)")
    p.add_argument("--stages", help="train only on these stages (comma-separated: draft,debug,improve)")
    p.add_argument("--threads", type=int, help="torch CPU threads")
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=cmd_sft)


def cmd_sft(args: argparse.Namespace) -> int:
    from mleforge.train.config import ModelConfig, SFTConfig
    from mleforge.train.sft import run_sft

    safe = args.model.replace("/", "_").replace(":", "-")
    stages = tuple(s.strip() for s in args.stages.split(",") if s.strip()) if args.stages else None
    model = {} if args.prompt_grad is None else {"prompt_grad": args.prompt_grad}
    config = SFTConfig(
        samples=args.samples, out=str(Path(args.out or f"runs/sft/{safe}")),
        model=ModelConfig(spec=args.model, full=args.full, lora_rank=args.lora_rank, threads=args.threads,
                          lora_layers=None if args.lora_layers == "all" else args.lora_layers, **model),
        epochs=args.epochs, max_steps=args.max_steps, lr=args.lr, batch_size=args.batch_size,
        grad_accum=args.grad_accum, max_length=args.max_length, stages=stages,
        loss_samples=args.loss_samples, seed=args.seed,
    )
    as_json = getattr(args, "json", False)
    result = run_sft(config, progress=not as_json, console=err_console)
    if as_json:
        print_json(result.to_dict())
        return 0
    print_table(f"sft {args.model}", ["samples", "left out (too long)", "steps", "loss before", "loss after", "wall s"],
                [[result.samples, result.dropped_long, result.steps, round(result.loss_before, 4),
                  round(result.loss_after, 4), result.wall_s]])
    err_console.print(f"model: hf:{result.model_dir}  (mleforge train --sft {result.model_dir})", highlight=False)
    return 0
