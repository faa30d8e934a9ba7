"""A LoRA update's cost by how many decoder layers carry the adapter (ModelConfig.lora_layers).

    python benchmarks/lora_layers.py --out lora_layers.json
    python benchmarks/lora_layers.py --layers all,12,8 --tokens 1350 --completion 110 --reps 3

One forward and backward pass of a warm-start-sized sequence (the cpu preset's SFT samples
are ~1,250 prompt tokens and ~110 completion tokens; the loss counts the completion only,
as mleforge's SFT and GRPO heads do) through the bundled model with a LoRA adapter made by
`mleforge.train.model.lora_config`, for each setting in turn, `--reps` timed passes after
one warm-up, all in one process and one run (so the ratios are what to read on a shared
machine). With the adapter on the top k layers only, autograd stops at the lowest of them:
the backward pass covers k of the model's layers. Writes JSON to --out (benchmarks/_record.py's
convention) and prints the table.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

from rich.console import Console

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _record import invocation, print_table, table, write_result  # noqa: E402

console = Console(stderr=True)


def layer_setting(text: str) -> int | None:
    return None if text.strip() == "all" else int(text)


def one_step(model, ids, targets) -> float:
    """Seconds of one forward and backward pass, the loss on the last len(targets) tokens."""
    import torch

    started = time.perf_counter()
    out = model(input_ids=ids, logits_to_keep=len(targets) + 1)
    loss = torch.nn.functional.cross_entropy(out.logits[0, :-1].float(), targets)
    loss.backward()
    model.zero_grad(set_to_none=True)
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="bundled:qwen2.5-coder-0.5b")
    parser.add_argument("--layers", default="all,12,8", help="settings to time: all, or a layer count")
    parser.add_argument("--tokens", type=int, default=1350, help="sequence length (prompt + completion)")
    parser.add_argument("--completion", type=int, default=110, help="the tokens the loss counts")
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="lora_layers.json")
    args = parser.parse_args(argv)
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as the CLI sets it

    import peft
    import torch

    from mleforge.train.config import ModelConfig
    from mleforge.train.model import (
        decoder_layer_count,
        load_for_training,
        lora_config,
        trainable_parameters,
    )

    torch.manual_seed(args.seed)
    settings = [layer_setting(s) for s in args.layers.split(",") if s.strip()]
    rows = []
    ids = None
    for setting in settings:
        config = ModelConfig(spec=args.model, lora_layers=setting)
        loaded = load_for_training(config)
        model = peft.get_peft_model(loaded.model, lora_config(config, loaded.model))
        if ids is None:
            vocab = model.config.get_text_config().vocab_size
            ids = torch.randint(100, min(vocab, 30000), (1, args.tokens))
        targets = ids[0, -args.completion:]

        one_step(model, ids, targets)  # warm-up
        times = [one_step(model, ids, targets) for _ in range(args.reps)]
        total = decoder_layer_count(model)
        row = {"lora_layers": "all" if setting is None else setting, "adapted_layers": min(setting or total, total),
               "decoder_layers": total, "trainable": trainable_parameters(model), "step_s": times,
               "median_s": statistics.median(times)}
        rows.append(row)
        console.print(f"{row['lora_layers']}: {[round(t, 2) for t in times]} s")
        del model, loaded
    base = next((r["median_s"] for r in rows if r["lora_layers"] == "all"), rows[0]["median_s"])
    for row in rows:
        row["vs_all"] = round(row["median_s"] / base, 3)
    shown = table(f"LoRA fwd+bwd, {args.tokens} tokens ({args.completion} scored), {args.model}",
                  ["lora layers", "trainable", "step s (each)", "median s", "vs all"],
                  [[row["lora_layers"], row["trainable"], ", ".join(f"{t:.1f}" for t in row["step_s"]),
                    round(row["median_s"], 2), row["vs_all"]] for row in rows])
    write_result(args.out, "lora_layers", shown, argv=invocation(__file__, argv), model=args.model, tokens=args.tokens,
                 completion=args.completion, reps=args.reps, threads=torch.get_num_threads(), rows=rows)
    print_table(shown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
