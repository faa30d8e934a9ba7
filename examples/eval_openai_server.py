"""Evaluate a model served behind an OpenAI-compatible API (vLLM, SGLang, llama.cpp's
server, a hosted API) as an MLE agent: tasks x seeds, each run a search of a few steps, graded
like MLE-bench (valid submissions, medals, normalized score), resumable.

    # serve a model, e.g.: vllm serve Qwen/Qwen2.5-Coder-7B-Instruct --port 8000
    python examples/eval_openai_server.py --base-url http://localhost:8000/v1 \
        --model Qwen/Qwen2.5-Coder-7B-Instruct --tasks lite --seeds 3 --steps 8
    # a hosted API: the key is read from the variable --api-key-env names, never from the command line
    OPENAI_API_KEY=... python examples/eval_openai_server.py --base-url https://api.openai.com/v1 --model gpt-4o-mini

The same from the shell: mleforge eval --policy openai:MODEL --tasks lite (OPENAI_BASE_URL gives the server).
"""

from __future__ import annotations

import argparse

from mleforge.eval.config import EvalConfig
from mleforge.eval.runner import EvalGrid, safe_name
from mleforge.tasks.registry import TaskRegistry


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-url", required=True, help="the server's /v1 URL")
    parser.add_argument("--model", required=True, help="the model name the server serves")
    parser.add_argument("--api-key-env", default="OPENAI_API_KEY", help="the NAME of the variable holding the key")
    parser.add_argument("--tasks", default="lite", help="lite | all | id,id,...")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=8, help="search steps per run")
    parser.add_argument("--max-new-tokens", type=int, default=2048)
    parser.add_argument("--out", help="evaluation folder (default runs/eval/<policy>; resumed if it exists)")
    args = parser.parse_args(argv)

    config = EvalConfig(
        policy=f"openai:{args.model}", tasks=args.tasks, seeds=args.seeds, steps=args.steps,
        max_new_tokens=args.max_new_tokens,
        policy_options={"base_url": args.base_url, "api_key_env": args.api_key_env},
    )
    grid = EvalGrid(config, args.out or f"runs/eval/{safe_name(config.policy)}", registry=TaskRegistry())
    result = grid.run()
    aggregate = result.aggregate
    metrics = aggregate["metrics"]
    for key in ("valid_submission", "above_median", "any_medal", "normalized_score"):
        mean, sem = metrics[key]["mean"], metrics[key]["sem"]
        shown = "-" if mean is None else f"{mean:.3f}" + ("" if sem is None else f" ± {sem:.3f} (SEM over seeds)")
        print(f"{key:>20}: {shown}")
    print(f"aggregate: {result.eval_dir}/aggregate.json; report: mleforge report {result.eval_dir}")
    return aggregate


if __name__ == "__main__":
    main()
