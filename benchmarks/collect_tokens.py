"""SFT samples in real tokens (Qwen2.5-Coder's tokenizer): prompt and completion, per stage.

    python benchmarks/collect_tokens.py --out collect_tokens.json              # collects (compact) in --work
    python benchmarks/collect_tokens.py --samples runs/collect/samples.jsonl   # measures what exists

Without `--samples` it runs `mleforge collect` (the template expert, the compact prompt
profile and its completion budget, or `--completion-chars`) in `--work` and times it; a
second call resumes, so the time is of the first. Prompts are counted with the chat template
applied (what a model prefills); completions as the assistant's text (a model generates one
more token, its end-of-turn). The table gives, per stage, min / median / p95 / p99 / max and
the share of samples within each of `--caps` tokens (a GRPO `max_new_tokens`), and what
collect left out and why (an expert answer over the budget is counted there, never cut).
The JSON (--out) is in benchmarks/_record.py's convention.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _record import invocation, print_table, table, write_result  # noqa: E402
from mleforge.policies.bundled import prepare_bundled  # noqa: E402

console = Console(stderr=True)
MODEL = "qwen2.5-coder-0.5b"


def stats(values: list[int]) -> dict[str, Any]:
    a = np.asarray(values, dtype=float)
    return {"n": len(values), "min": int(a.min()), "median": float(np.median(a)),
            "p95": float(np.percentile(a, 95)), "p99": float(np.percentile(a, 99)), "max": int(a.max())}


def spread(figures: dict[str, Any], keys: tuple[str, ...]) -> str:
    """min/median/.../max as one cell: "12/40.5/96/120"."""
    return "/".join(f"{figures[k]:g}" for k in keys)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", help="a samples.jsonl to measure (default: collect one in --work)")
    parser.add_argument("--tasks", default="lite")
    parser.add_argument("--episodes", type=int, default=1)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument("--completion-chars", type=int, default=None, help="the collect budget (default: compact's)")
    parser.add_argument("--work", default="runs/bench/collect_tokens")
    parser.add_argument("--caps", default="128,160,192,224,256", help="max_new_tokens values to report shares for")
    parser.add_argument("--out", default="collect_tokens.json")
    args = parser.parse_args(argv)

    counts: dict[str, Any] = {}
    wall = None
    if args.samples:
        path = Path(args.samples)
        summary = path.parent / "collect.json"
        counts = json.loads(summary.read_text()) if summary.is_file() else {}
    else:
        from mleforge.expert.collect import CollectConfig, collect_samples

        config = CollectConfig(tasks=args.tasks, episodes=args.episodes, steps=args.steps, embedder="tfidf",
                               prompt_profile="compact", completion_chars=args.completion_chars,
                               workers=args.workers)
        start = time.perf_counter()
        result = collect_samples(config, args.work, progress=True, console=console)
        wall = round(time.perf_counter() - start, 1)
        # result.counts leaves out the budget collect.json records beside them: the one used.
        path, counts = Path(result.samples_path), {**result.counts, "completion_chars": config.completion_budget}
    samples = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    if not samples:
        console.print(f"no samples in {path}")
        return 1

    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(prepare_bundled(MODEL)))
    caps = [int(c) for c in args.caps.split(",")]
    rows = []
    for s in samples:
        prompt = tok.apply_chat_template(s["prompt"], tokenize=False, add_generation_prompt=True)
        text = s["completion"][0]["content"]
        rows.append({"task_id": s["task_id"], "stage": s["stage"], "chars": len(text),
                     "prompt_tokens": len(tok(prompt, add_special_tokens=False)["input_ids"]),
                     "completion_tokens": len(tok(text, add_special_tokens=False)["input_ids"])})
    by_stage: dict[str, Any] = {}
    for stage in ("draft", "debug", "improve", "edits"):
        chosen = [r for r in rows if r["stage"] == stage or (stage == "edits" and r["stage"] != "draft")]
        if not chosen:
            continue
        completion = [r["completion_tokens"] for r in chosen]
        by_stage[stage] = {
            "prompt_tokens": stats([r["prompt_tokens"] for r in chosen]),
            "completion_tokens": stats(completion),
            "completion_chars": stats([r["chars"] for r in chosen]),
            # +1: the end-of-turn token a model generates after the text.
            "within_cap": {str(c): round(sum(t + 1 <= c for t in completion) / len(completion), 3) for c in caps},
        }
    shown = table(f"{len(rows)} samples of {path} ({MODEL} tokens)",
                  ["stage", "n", "prompt min/med/p95/max", "completion min/med/p95/p99/max", *(f"<= {c}" for c in caps)],
                  [[stage, s["completion_tokens"]["n"], spread(s["prompt_tokens"], ("min", "median", "p95", "max")),
                    spread(s["completion_tokens"], ("min", "median", "p95", "p99", "max")),
                    *(f"{s['within_cap'][str(cap)]:.0%}" for cap in caps)] for stage, s in by_stage.items()])
    write_result(args.out, "collect_tokens", shown, argv=invocation(__file__, argv), model=MODEL,
                 samples_path=str(path), samples=len(rows), collect_wall_s=wall,
                 completion_budget_chars=counts.get("completion_chars"), left_out=counts.get("left_out"),
                 samples_by_stage=counts.get("samples_by_stage"), by_stage=by_stage, rows=rows,
                 python=sys.version.split()[0])
    print_table(shown)
    console.print(f"left out: {counts.get('left_out')}; collect wall time: {wall} s; wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
