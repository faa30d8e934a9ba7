"""How long the bundled models take to get ready, and how fast they generate on this machine.

    python benchmarks/policies.py --out policies.json               # the real cache, as users get it
    python benchmarks/policies.py --fresh --out policies.json       # time assembly and conversion too
    python benchmarks/policies.py --models smollm2-135m --threads 1 2 --batches 1 4 --tokens 64

Stages: importing torch + transformers, assemble (parts -> verified GGUF), convert (GGUF ->
transformers folder), first load, second load (the OS has the files cached), then generation of exactly `--tokens`
new tokens per sequence (sampling, end-of-sequence ignored) for each batch size and thread count.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from mleforge.policies.bundled import (
    BUNDLED,
    assemble,
    convert,
    get_bundled,
    is_converted,
    models_root,
)
from mleforge.policies.hf import HFConfig, HFPolicy, import_torch_transformers

PROMPT = [{"role": "system", "content": "You are a helpful Python programmer."},
          {"role": "user", "content": "Write a Python function that trains a logistic regression "
                                      "on a CSV file and writes predictions."}]


def timed(fn, *args, **kwargs) -> tuple[Any, float]:
    started = time.perf_counter()
    result = fn(*args, **kwargs)
    return result, time.perf_counter() - started


def tokens_per_s(policy: HFPolicy, batch: int, tokens: int, threads: int) -> dict[str, float]:
    """Throughput of generating exactly `tokens` tokens for `batch` copies of one prompt."""
    import torch

    model, tokenizer = policy.hf_model, policy.tokenizer
    text = tokenizer.apply_chat_template(PROMPT, add_generation_prompt=True, tokenize=False)
    encoded = tokenizer([text] * batch, return_tensors="pt", padding=True, padding_side="left",
                        add_special_tokens=False)
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        with torch.inference_mode():
            torch.manual_seed(0)
            _, seconds = timed(model.generate, **encoded, max_new_tokens=tokens,
                               min_new_tokens=tokens, do_sample=True, temperature=0.7, top_k=0,
                               pad_token_id=tokenizer.pad_token_id)
    finally:
        torch.set_num_threads(previous)
    return {"batch": batch, "threads": threads, "tokens": batch * tokens, "seconds": seconds,
            "tokens_per_s": batch * tokens / seconds}


def bench_model(name: str, root: Path, args: argparse.Namespace) -> dict[str, Any]:
    model = get_bundled(name)
    gguf_ready = (root / name / model.gguf_file).is_file()
    _, assemble_s = timed(assemble, model, root)
    hf_ready = is_converted(root / name / "hf", model)
    folder, convert_s = timed(convert, model, root)
    config = HFConfig(model=str(folder), name=name, device="cpu")
    policy, first_load_s = timed(HFPolicy, config)
    policy.close()
    policy, second_load_s = timed(HFPolicy, config)
    runs = [tokens_per_s(policy, batch, args.tokens, threads)
            for threads in args.threads for batch in args.batches]
    policy.close()
    return {"model": name, "assemble_s": None if gguf_ready else assemble_s,
            "convert_s": None if hf_ready else convert_s, "first_load_s": first_load_s,
            "second_load_s": second_load_s, "generation": runs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(BUNDLED), choices=list(BUNDLED))
    parser.add_argument("--fresh", action="store_true",
                        help="use an empty temporary cache, so assembly and conversion are timed")
    parser.add_argument("--batches", nargs="+", type=int, default=[1, 4])
    parser.add_argument("--threads", nargs="+", type=int, default=[1, os.cpu_count() or 1])
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()

    _, import_s = timed(import_torch_transformers)
    with tempfile.TemporaryDirectory(prefix="mleforge-models-") as temp:
        root = Path(temp) if args.fresh else models_root()
        results = [bench_model(name, root, args) for name in args.models]
    report = {"machine": {"cpus": os.cpu_count(), "processor": platform.processor(),
                          "platform": platform.platform()},
              "load_average_after": os.getloadavg(), "import_s": import_s, "results": results}
    if args.out:
        args.out.write_text(json.dumps(report, indent=1))
    show(results, import_s)


def show(results: list[dict[str, Any]], import_s: float) -> None:
    seconds = lambda v: "cached" if v is None else f"{v:.1f}"  # noqa: E731
    stages = Table(title=f"Getting ready (seconds; importing torch + transformers: {import_s:.1f})")
    for column in ("model", "assemble", "convert", "first load", "second load"):
        stages.add_column(column)
    speed = Table(title="Generation on CPU (sampling, fixed length)")
    for column in ("model", "threads", "batch", "tokens", "seconds", "tokens/s"):
        speed.add_column(column)
    for r in results:
        stages.add_row(r["model"], seconds(r["assemble_s"]), seconds(r["convert_s"]),
                       seconds(r["first_load_s"]), seconds(r["second_load_s"]))
        for g in r["generation"]:
            speed.add_row(r["model"], str(g["threads"]), str(g["batch"]), str(g["tokens"]),
                          f"{g['seconds']:.1f}", f"{g['tokens_per_s']:.1f}")
    Console().print(stages, speed)


if __name__ == "__main__":
    main()
