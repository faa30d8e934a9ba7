"""A training micro-batch on a CPU: TRL's fused LM head against the completion-only path.

    python benchmarks/lm_head.py --tiny --out bench-out/lm_head-tiny.json        # plumbing, seconds
    python benchmarks/lm_head.py --out bench-out/lm_head.json                    # GRPO's update, minutes
    python benchmarks/lm_head.py --objective sft --prompt-tokens 1250 --completion-tokens 130 \
        --out bench-out/lm_head-sft.json                                         # the warm start's step
    python benchmarks/lm_head.py --group 4 --prompt-tokens 1250 --out bench-out/lm_head-group.json
                                                                                 # a whole group's update
    python benchmarks/lm_head.py --group 4 --prompt-tokens 1250 --prompt-grad-off   # the prompt without a graph

On a device without Triton, TRL 1.16's fused LM head projects every position of a sequence
through the vocabulary; mleforge's trainers project the completion positions only. This
times both on one sequence of the CPU main job's shape: `--prompt-tokens` of prompt and
`--completion-tokens` of completion, with LoRA (the preset's rank, all linear layers), the
two paths `--repeats` times each in alternation.

- `--objective grpo` (the default): a GRPO update micro-batch before the optimizer: the
  log-probabilities and entropies (TRL's `GRPOTrainer._get_per_token_logps_and_entropies`
  body against mleforge.train.grpo.trainer.completion_logps) and a backward of their sum. The
  compact improve prompt's median was ~1,380 tokens, and the cpu preset caps completions at 192.
- `--objective grpo --group G` (G > 1): a micro-batch of one GRPO group, G sequences of one
  prompt with G different completions, as the cpu preset's update takes it
  (micro_batch = group_size): the completion-only path one sequence at a time (what a
  micro-batch of 1 did) against the same path with the group's prompt run once
  (mleforge.train.grpo.trainer.completion_logps' `share_prompts`). TRL's fused head is left out
  here: it is the one-sequence comparison's baseline.
- `--objective sft`: one `training_step` (forward, loss, backward, under the run's bf16
  autocast) of the trainer `mleforge sft` builds (mleforge.train.sft.sft_trainer), with the
  completion-only cut on and off (TRL's own compute_loss then). The main job's warm-start
  samples are ~1,250-token prompts with ~130-token edit completions.

- `--prompt-grad-off`: the path the trainer takes (the completion-only head; a group's prompt
  shared) against the same path with ModelConfig.prompt_grad off: the prompt's positions but
  its last run without a graph, so the backward pass skips them (the same values, a gradient
  without the prompt's key/value path).

It also checks that both give the same numbers (max absolute difference of the
log-probabilities, or of the loss). Writes JSON to --out (benchmarks/_record.py's convention)
and prints a table: seconds per micro-batch (median over the repeats) for each path and their
ratio, measured in one run.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as the CLI does, before torch loads

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from _record import invocation, print_table, table, write_result  # noqa: E402

TEMPERATURE = 0.8  # the cpu preset's rollout temperature


def load(args: argparse.Namespace, work: Path) -> Any:
    from peft import get_peft_model
    from trl.trainer.utils import add_fused_lm_head

    from mleforge.train.config import ModelConfig
    from mleforge.train.model import load_for_training

    spec = args.model
    if args.tiny:
        sys.path.insert(0, str(ROOT))
        from tests.train.tiny import tiny_model

        spec = f"hf:{tiny_model(work / 'tiny')}"
    loaded = load_for_training(ModelConfig(spec=spec, lora_rank=args.lora_rank, threads=args.threads))
    add_fused_lm_head(loaded.model, temperature=TEMPERATURE, outputs=("log_probs", "entropy"))  # as GRPOTrainer does
    model = get_peft_model(loaded.model, loaded.peft_config)
    model.train()
    return spec, model


def load_sft(args: argparse.Namespace, work: Path) -> Any:
    """The trainer `mleforge sft` trains with, on a one-sample dataset (the benchmark feeds its own batch)."""
    from datasets import Dataset

    from mleforge.train.config import ModelConfig, SFTRunConfig
    from mleforge.train.model import load_for_training
    from mleforge.train.sft import sft_trainer

    spec = args.model
    if args.tiny:
        sys.path.insert(0, str(ROOT))
        from tests.train.tiny import tiny_model

        spec = f"hf:{tiny_model(work / 'tiny')}"
    config = SFTRunConfig(samples="-", out=str(work / "sft"),
                          model=ModelConfig(spec=spec, lora_rank=args.lora_rank, threads=args.threads))
    loaded = load_for_training(config.model)
    data = Dataset.from_list([{"prompt": [{"role": "user", "content": "q"}],
                               "completion": [{"role": "assistant", "content": "a"}]}])
    trainer = sft_trainer(config, loaded, data, work / "sft" / "checkpoints")
    trainer.current_gradient_accumulation_steps = 1  # what train() sets before its first step
    return spec, trainer


def sft_step(native: bool) -> Any:
    """One training_step of the SFT trainer; `native`: TRL's compute_loss as it is (every position)."""
    import mleforge.train.sft_trainer as module

    def path(trainer: Any, ids: Any, mask: Any, keep: int) -> Any:
        labels = ids.masked_fill(mask == 0, -100)
        labels[:, :-keep] = -100
        kept = module.compact_head_native
        if native:
            module.compact_head_native = lambda device: True
        try:
            return trainer.training_step(trainer.model, {"input_ids": ids, "attention_mask": mask, "labels": labels})
        finally:
            module.compact_head_native = kept

    return path


def fused(model: Any, ids: Any, mask: Any, keep: int) -> Any:
    """TRL 1.16's GRPOTrainer._get_per_token_logps_and_entropies, one chunk."""
    labels = ids.masked_fill(mask == 0, -100)
    labels[:, :-keep] = -100
    out = model(input_ids=ids, attention_mask=mask, labels=labels, fused_lm_head=True)
    return out.log_probs[:, -keep:], out.entropy[:, -keep:]


def ours(model: Any, ids: Any, mask: Any, keep: int) -> Any:
    from mleforge.train.grpo.trainer import completion_logps

    logps, entropy, _ = completion_logps(model, ids, mask, keep, batch_size=1, compute_entropy=True,
                                         temperature=TEMPERATURE, entropy_requires_grad=False)
    return logps, entropy


def shared(model: Any, ids: Any, mask: Any, keep: int) -> Any:
    """The whole micro-batch in one call, each distinct prompt run once."""
    from mleforge.train.grpo.trainer import completion_logps

    logps, entropy, _ = completion_logps(model, ids, mask, keep, batch_size=ids.size(0), compute_entropy=True,
                                         temperature=TEMPERATURE, entropy_requires_grad=False, share_prompts=True)
    return logps, entropy


def detached(model: Any, ids: Any, mask: Any, keep: int) -> Any:
    """The micro-batch in one call, each distinct prompt once and without a graph but its last token."""
    from mleforge.train.grpo.trainer import completion_logps

    logps, entropy, _ = completion_logps(model, ids, mask, keep, batch_size=ids.size(0), compute_entropy=True,
                                         temperature=TEMPERATURE, entropy_requires_grad=False, prompt_grad=False)
    return logps, entropy


def sft_prompt_grad(on: bool) -> Any:
    """One training_step of the SFT trainer's completion-only path, the prompt with a graph or without."""
    step = sft_step(native=False)

    def path(trainer: Any, ids: Any, mask: Any, keep: int) -> Any:
        trainer.prompt_grad = on
        return step(trainer, ids, mask, keep)

    return path


def timed(path: Any, model: Any, ids: Any, mask: Any, keep: int) -> tuple[float, Any]:
    model.zero_grad(set_to_none=True)
    started = time.perf_counter()
    logps, _ = path(model, ids, mask, keep)  # entropies computed as the loss asks; no gradient through them
    logps.sum().backward()
    return time.perf_counter() - started, logps.detach()


def timed_rows(path: Any, model: Any, ids: Any, mask: Any, keep: int) -> tuple[float, Any]:
    """Each row its own forward and backward, as micro-batches of one sequence take a group."""
    model.zero_grad(set_to_none=True)
    started = time.perf_counter()
    rows = []
    for i in range(ids.size(0)):
        logps, _ = path(model, ids[i:i + 1], mask[i:i + 1], keep)
        logps.sum().backward()
        rows.append(logps.detach())
    seconds = time.perf_counter() - started
    import torch

    return seconds, torch.cat(rows)


def timed_sft(path: Any, trainer: Any, ids: Any, mask: Any, keep: int) -> tuple[float, Any]:
    trainer.model.zero_grad(set_to_none=True)
    started = time.perf_counter()
    loss = path(trainer, ids, mask, keep)  # forward, loss and backward
    return time.perf_counter() - started, loss.detach().float()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--objective", choices=("grpo", "sft"), default="grpo")
    parser.add_argument("--model", default="bundled:qwen2.5-coder-0.5b")
    parser.add_argument("--tiny", action="store_true", help="a tiny random model built here instead of --model")
    parser.add_argument("--prompt-tokens", type=int, default=1380)
    parser.add_argument("--completion-tokens", type=int, default=192)
    parser.add_argument("--group", type=int, default=1,
                        help="grpo: sequences of one prompt in the micro-batch (>1: shared prompt against one at a time)")
    parser.add_argument("--prompt-grad-off", action="store_true",
                        help="time the trainer's path against the same with the prompt run without a graph")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--lora-rank", type=int, default=16)
    parser.add_argument("--threads", type=int, help="torch CPU threads")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="bench-out/lm_head.json")
    args = parser.parse_args(argv)
    if args.prompt_tokens < 1 or args.completion_tokens < 1 or args.repeats < 1 or args.group < 1:
        parser.error("--prompt-tokens, --completion-tokens, --repeats and --group must be at least 1")
    if args.group > 1 and args.objective != "grpo":
        parser.error("--group: only with --objective grpo (an SFT batch's prompts differ)")

    import torch

    from mleforge.train.grpo.trainer import compact_head_native

    with tempfile.TemporaryDirectory(prefix="mleforge-lm-head-") as tmp:
        if args.objective == "sft":
            spec, subject = load_sft(args, Path(tmp))
            model = subject.model
            paths = (("trl_fused", sft_step(native=True), timed_sft),
                     ("completion_only", sft_step(native=False), timed_sft))
            if args.prompt_grad_off:
                paths = (("completion_only", sft_prompt_grad(True), timed_sft),
                         ("prompt_no_grad", sft_prompt_grad(False), timed_sft))
        else:
            spec, subject = load(args, Path(tmp))
            model = subject
            paths = ((("trl_fused", fused, timed), ("completion_only", ours, timed)) if args.group == 1
                     else (("completion_only", ours, timed_rows), ("shared_prompt", shared, timed)))
            if args.prompt_grad_off:
                paths = ((paths[1][0], paths[1][1], timed), ("prompt_no_grad", detached, timed))
        vocab = int(model.get_input_embeddings().weight.size(0))
        device = next(model.parameters()).device
        g = torch.Generator().manual_seed(args.seed)
        length = args.prompt_tokens + args.completion_tokens
        ids = torch.randint(10, min(vocab, 30000), (1, length), generator=g)
        if args.group > 1:  # one prompt, G completions
            completions = torch.randint(10, min(vocab, 30000), (args.group, args.completion_tokens), generator=g)
            ids = torch.cat([ids[:, :args.prompt_tokens].expand(args.group, -1), completions], dim=1)
        ids = ids.to(device)
        mask = torch.ones_like(ids)
        keep = args.completion_tokens
        seconds: dict[str, list[float]] = {name: [] for name, _, _ in paths}
        values: dict[str, Any] = {}
        _, warm_path, warm_clock = paths[1]
        warm_clock(warm_path, subject, ids, mask, keep)  # warm-up: allocator, thread pool
        for _ in range(args.repeats):
            for name, path, clock in paths:
                s, values[name] = clock(path, subject, ids, mask, keep)
                seconds[name].append(round(s, 3))
    median = {name: statistics.median(v) for name, v in seconds.items()}
    compared = "loss" if args.objective == "sft" else "logp"
    (base, _, _), (ours_name, _, _) = paths
    out = {
        "config": {k: v for k, v in vars(args).items() if k != "out"}, "model": spec, "device": str(device),
        "objective": args.objective, "trl_scores_completion_only_here": compact_head_native(device),
        "seconds": seconds, "median_s": median,
        "baseline": base, "subject": ours_name, "speedup": round(median[base] / median[ours_name], 3),
        f"max_abs_{compared}_diff": float((values[base] - values[ours_name]).abs().max()),
    }
    what = "one sequence" if args.group == 1 else f"one group of {args.group} sequences"
    shown = table(f"{args.objective}: forward + backward of {what} ({spec}, {args.prompt_tokens} prompt + {keep} "
                  f"completion tokens, LoRA r{args.lora_rank}, {args.repeats} repeats)",
                  ["path", "median s", "each s"],
                  [[name, round(median[name], 3), " ".join(f"{v:.2f}" for v in values)]
                   for name, values in seconds.items()])
    write_result(args.out, "lm_head", shown, argv=invocation(__file__, argv), **out)
    print_table(shown)
    print(f"speedup {out['speedup']}x ({base} / {ours_name}); max |{compared} difference| {out[f'max_abs_{compared}_diff']:.2e}; "
          f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
