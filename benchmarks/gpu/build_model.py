"""The GPU check's model: the carried architecture with random weights and the real tokenizer.

    python benchmarks/gpu/build_model.py CARRY OUT [--report JSON] [--layers N] [--hidden N] [--device cuda]

CARRY is what benchmarks/gpu/prepare.sh filled (model.json, tokenizer/); OUT becomes a
transformers folder that `--model hf:OUT` trains. No weights travel to the GPU machine (the
bundled GGUFs are 98-491 MB, a call carries 64 MiB), so the check proves the training path's
mechanics and timings at the real model's shape, not what a trained model learns: its
completions are random tokens. --layers/--hidden shrink it (the CPU test of the script).
Prints (and writes to --report) what it built: the parameters, dtype and seconds it took.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path


def build(carry: Path, out: Path, layers: int | None, hidden: int | None, device: str) -> dict:
    import torch
    import transformers

    started = time.perf_counter()
    dims = json.loads((carry / "model.json").read_text())
    dims.pop("source", None)
    if layers:
        dims["num_hidden_layers"] = layers
    if hidden:  # a small model for the CPU test: keep the head count dividing the width
        dims.update(hidden_size=hidden, intermediate_size=4 * hidden, num_attention_heads=4, num_key_value_heads=2)
    model_type = dims.pop("model_type")
    rope_theta = dims.pop("rope_theta", None)
    config = transformers.AutoConfig.for_model(model_type, **dims)
    if rope_theta is not None:  # transformers 5 keeps it in rope_parameters, 4.x in rope_theta
        if isinstance(getattr(config, "rope_parameters", None), dict):
            config.rope_parameters["rope_theta"] = rope_theta
        else:
            config.rope_theta = rope_theta
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    torch.manual_seed(0)
    with torch.device(device):  # initialised where it will train: seconds, not minutes, for 0.5B
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=dtype)
    model.generation_config.eos_token_id = dims.get("eos_token_id")
    model.generation_config.pad_token_id = dims.get("pad_token_id")
    model.save_pretrained(out)
    tokenizer = transformers.AutoTokenizer.from_pretrained(carry / "tokenizer")
    tokenizer.save_pretrained(out)
    return {"folder": str(out), "model_type": model_type, "layers": config.num_hidden_layers,
            "hidden": config.hidden_size, "parameters": sum(p.numel() for p in model.parameters()),
            "dtype": str(dtype).removeprefix("torch."), "built_on": device,
            "tokenizer_tokens": len(tokenizer), "chat_template": bool(tokenizer.chat_template),
            "seconds": round(time.perf_counter() - started, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("carry", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--report", type=Path, help="also write the JSON here")
    parser.add_argument("--layers", type=int, help="decoder layers (default: the carried model's)")
    parser.add_argument("--hidden", type=int, help="width (default: the carried model's)")
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    args = parser.parse_args()
    report = json.dumps(build(args.carry, args.out, args.layers, args.hidden, args.device))
    if args.report:
        args.report.write_text(report + "\n")
    print(report)


if __name__ == "__main__":
    main()
