"""How long the bundled models take to get ready, and how fast each engine generates with them.

    python benchmarks/policies.py --out policies.json                  # everything (long: see below)
    python benchmarks/policies.py --fresh --out policies.json          # time assembly and conversions
    python benchmarks/policies.py --models smollm2-135m --prompts short \\
        --engines transformers-float32 ct2-int8 --batches 1 4 --group 4 --tokens 16

Stages per model: assemble (parts -> verified GGUF), convert (GGUF -> transformers folder),
then per engine: load (for ct2, with the conversion to CTranslate2 timed apart when it is not
cached) and generation. Engines: transformers in float32 and bfloat16, ct2 int8 and float32.
Prompts: `short` (two chat lines) and `improve`, the agent's real improve prompt for titanic
(~3,900 SmolLM2 tokens: one step of the template expert is run to get a journal to improve).

For each prompt, at every `--batches` size (copies of the prompt, prefilled separately by
either engine) and for one prompt with `--group` samples (a GRPO group: transformers expands
the prompt G times, ct2 prefills it once with `num_hypotheses`), it times exactly one new token
(the prefill) and exactly `--tokens` new tokens (sampling at temperature 0.7, end-of-sequence
ignored), and reports prefill seconds, tokens/s over the whole call and decode tokens/s after
the prefill. For ct2 it also measures what a GRPO trainer would get from it as a rollout
engine: the gap between its per-token log-probabilities and the float32 transformers model's
on its own samples (TRL's importance-sampling correction works on exactly that gap), and the
cost of handing it new in-memory weights (`Ct2Engine.sync`). The full default run (both
models, four engines, both prompts) takes hours on 2 CPU cores, mostly the long prompt.

Long runs: the report is written to `--out` after every measurement (with `"complete": false`
until the end; in the results convention of benchmarks/_record.py, its tables those of what is
measured so far), and `--resume` keeps the measurements of an earlier report at that path and
measures only what it lacks. `--budget S` skips a measurement expected to take more than S
seconds: the estimate is a lower bound, the prefill alone, scaled from the largest shape already
measured for that engine and prompt, else from a timed prefill of the prompt's first
`--probe-tokens` tokens (attention makes longer prompts slower per token); a skipped shape is
reported with its estimate and the prefill rate it came from.

The report's header records the variables that choose the numeric backends and the library
versions: ctranslate2 picks its GEMM backend by CPU at import (oneDNN on AMD), and
`CT2_USE_MKL=1 python benchmarks/policies.py ...` measures it with Intel MKL forced instead.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _record import print_tables, stamp, table, write_json
from mleforge.policies.bundled import (
    BUNDLED,
    assemble,
    convert,
    get_bundled,
    is_converted,
    models_root,
)
from mleforge.policies.extras import import_torch_transformers
from mleforge.policies.hf import HFPolicy
from mleforge.policies.hf_config import HFConfig

SHORT = [{"role": "system", "content": "You are a helpful Python programmer."},
         {"role": "user", "content": "Write a Python function that trains a logistic regression "
                                     "on a CSV file and writes predictions."}]
ENGINES = {  # name -> HFConfig options
    "transformers-float32": {"engine": "transformers", "dtype": "float32"},
    "transformers-bfloat16": {"engine": "transformers", "dtype": "bfloat16"},
    "ct2-int8": {"engine": "ct2", "quantization": "int8"},
    "ct2-float32": {"engine": "ct2", "quantization": "float32"},
}
TEMPERATURE = 0.7


def timed(fn, *args, **kwargs) -> tuple[Any, float]:
    started = time.perf_counter()
    result = fn(*args, **kwargs)
    return result, time.perf_counter() - started


def improve_prompt(work: Path) -> list[dict[str, str]]:
    """The prompt the agent sees to improve a first titanic solution: one template step
    through the real CLI, then the improve state of the node it wrote."""
    from mleforge.agent.journal import Journal
    from mleforge.agent.prompts import render_prompt
    from mleforge.agent.state import State
    from mleforge.tasks.registry import TaskRegistry

    run_dir = work / "template-run"
    subprocess.run([sys.executable, "-m", "mleforge", "run", "--task", "titanic", "--policy",
                    "template", "--steps", "1", "--run-dir", str(run_dir), "--json"],
                   check=True, capture_output=True, text=True)
    journal = Journal.load(run_dir / "journal.json")
    state = State.after(journal, journal.nodes[-1])
    if state is None or state.stage != "improve":
        raise SystemExit("the template's first titanic node was not valid; no improve prompt")
    return list(render_prompt(state, TaskRegistry().get("titanic")))


# --- one engine, fixed lengths ---


def transformers_run(policy: HFPolicy, ids: list[int], copies: int, group: int, tokens: int,
                     threads: int) -> float:
    """Seconds to generate exactly `tokens` tokens for `copies` prompts x `group` samples."""
    import torch

    model = policy.hf_model
    encoded = {"input_ids": torch.tensor([ids] * copies),
               "attention_mask": torch.ones(copies, len(ids), dtype=torch.long)}
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        with torch.inference_mode():
            torch.manual_seed(0)
            _, seconds = timed(model.generate, **encoded, max_new_tokens=tokens,
                               min_new_tokens=tokens, num_return_sequences=group, do_sample=True,
                               temperature=TEMPERATURE, top_k=0,
                               pad_token_id=policy.engine.eos_ids[0])
    finally:
        torch.set_num_threads(previous)
    return seconds


def ct2_run(policy: HFPolicy, ids: list[int], copies: int, group: int, tokens: int,
            threads: int) -> float:
    """The same with ctranslate2 (its threads are fixed when the policy loads: `threads`)."""
    start = policy.tokenizer.convert_ids_to_tokens(ids)
    _, seconds = timed(policy.engine.generator.generate_batch, [start] * copies,
                       max_length=tokens, min_length=tokens, num_hypotheses=group,
                       include_prompt_in_result=False, sampling_topk=0,
                       sampling_temperature=TEMPERATURE)
    return seconds


def measure(run, policy: HFPolicy, ids: list[int], copies: int, group: int, tokens: int,
            threads: int) -> dict[str, Any]:
    prefill_s = run(policy, ids, copies, group, 1, threads)
    total_s = run(policy, ids, copies, group, tokens, threads)
    sequences = copies * group
    decode_s = total_s - prefill_s  # not positive when the two calls' noise exceeds the decode
    return {"sequences": sequences, "tokens": sequences * tokens, "prefill_s": prefill_s,
            "total_s": total_s, "tokens_per_s": sequences * tokens / total_s,
            "decode_tokens_per_s": sequences * (tokens - 1) / decode_s if decode_s > 0 else None}


def logprob_mismatch(policy: HFPolicy, reference: Any, ids: list[int], samples: int,
                     tokens: int) -> dict[str, Any]:
    """How far the engine's own log-probabilities of its samples (what a rollout engine hands
    TRL) are from the float32 transformers model's (what TRL trains on), at temperature 1."""
    import torch

    from mleforge.policies import SamplingConfig

    sampling = SamplingConfig(temperature=1.0, max_new_tokens=tokens, seed=0)
    drawn = policy.engine.generate([ids], samples, sampling, seed=0, logprobs=True).samples[0]
    token_gaps, sequence_gaps = [], []
    for sample in drawn:
        sequence = torch.tensor([ids + list(sample.token_ids)])
        with torch.inference_mode():
            logits = reference(sequence).logits[0, len(ids) - 1:-1].float()
        exact = torch.log_softmax(logits, -1).gather(
            1, torch.tensor(sample.token_ids)[:, None])[:, 0]
        gap = torch.tensor(sample.logprobs) - exact
        token_gaps += gap.abs().tolist()
        sequence_gaps.append(gap.sum().item())
    return {"samples": samples, "tokens": len(token_gaps),
            "mean_abs_token_gap": sum(token_gaps) / len(token_gaps),
            "max_abs_token_gap": max(token_gaps),
            "sequence_log_ratios": sequence_gaps}  # log p_engine - log p_reference per sample


def sync_cost(reference: Any, tokenizer: Any, quantization: str, threads: int) -> dict[str, Any]:
    """What a GRPO step would pay to hand the trainer's in-memory model to a ct2 engine."""
    from mleforge.policies.engines.ct2 import Ct2Engine

    engine, first_s = timed(Ct2Engine.from_model, reference, tokenizer,
                            quantization=quantization, num_threads=threads)
    report = engine.sync(reference)
    engine.close()
    return {"first_s": first_s, **report.to_dict()}


def prefills(engine: str, mode: str, size: int) -> int:
    """Prompts a shape prefills: transformers expands a group's prompt G times, ct2 once."""
    return size if mode == "batch" or not engine.startswith("ct2") else 1


def estimate(engine: str, runs: list[dict[str, Any]], prompt: str, mode: str, size: int,
             prompt_tokens: int, probe: dict[str, Any] | None) -> float | None:
    """A lower bound on a shape's seconds (two calls, each prefilling): scaled from the
    measured shape of this prompt that prefilled the most, else from the probe's rate."""
    measured = [g for g in runs if g["prompt"] == prompt and g["prompt_tokens"] == prompt_tokens
                and "prefill_s" in g]
    count = prefills(engine, mode, size)
    if measured:
        base = max(measured, key=lambda g: prefills(engine, g["mode"], g["size"]))
        return 2 * base["prefill_s"] * count / prefills(engine, base["mode"], base["size"])
    if probe is not None:
        return 2 * count * prompt_tokens / probe["prefill_tokens_per_s"]
    return None


def backend_environment() -> dict[str, str]:
    """The variables that choose or tune the numeric backends (ctranslate2 reads CT2_USE_MKL,
    CT2_FORCE_CPU_ISA and others once, at import), and the library versions."""
    from importlib.metadata import PackageNotFoundError, version

    chosen = {k: v for k, v in sorted(os.environ.items())
              if k.startswith(("CT2_", "OMP_", "MKL_", "DNNL_", "ONEDNN_"))}
    for package in ("torch", "transformers", "ctranslate2"):
        with contextlib.suppress(PackageNotFoundError):
            chosen[f"version:{package}"] = version(package)
    return chosen


def run_key(run: dict[str, Any]) -> tuple:
    return run["prompt"], run["mode"], run["size"]


def digest(messages: list[dict[str, str]]) -> str:
    return hashlib.sha256(json.dumps(messages, sort_keys=True).encode()).hexdigest()


def bench_engine(model_name: str, folder: Path, engine: str, prompts: dict[str, list],
                 args: argparse.Namespace, ct2_cache: Path, reference: Any,
                 report: Report) -> None:
    ct2 = engine.startswith("ct2")
    for threads in args.threads:
        previous = report.earlier(model_name, engine, threads)
        kept = {run_key(g): g for g in (previous or {}).get("runs", []) if "prefill_s" in g}
        want_rollout = ct2 and reference is not None
        shapes = [("batch", b) for b in args.batches] + ([("group", args.group)] if args.group else [])
        if previous is not None and (not want_rollout or "sync" in previous) and all(
                (name, mode, size) in kept for name in prompts for mode, size in shapes):
            report.add({**previous, "runs": [  # everything measured before: nothing to load
                {**kept[(name, mode, size)], "resumed": True}
                for name in prompts for mode, size in shapes]})
            continue
        config = HFConfig(model=str(folder), name=model_name, device="cpu", num_threads=threads,
                          ct2_cache=str(ct2_cache) if ct2 else None, **ENGINES[engine])
        policy, load_s = timed(HFPolicy, config)
        conversion = getattr(policy.engine, "conversion", None)
        convert_s = conversion.convert_s if conversion is not None and conversion.built else None
        run = ct2_run if ct2 else transformers_run
        entry = {"model": model_name, "engine": engine, "threads": threads,
                 "convert_s": convert_s, "load_s": load_s - (convert_s or 0.0),
                 "engine_used": policy.to_dict()["engine_used"], "prompt_tokens": {},
                 "probes": {}, "runs": []}
        report.add(entry)
        for prompt_name, messages in prompts.items():
            ids = policy.prompt_ids(messages)
            entry["prompt_tokens"][prompt_name] = len(ids)
            for mode, size in shapes:
                key = (prompt_name, mode, size)
                if key in kept:
                    entry["runs"].append({**kept[key], "resumed": True})
                    continue
                row = {"prompt": prompt_name, "prompt_tokens": len(ids), "mode": mode, "size": size}
                if args.budget is not None:
                    probe = entry["probes"].get(prompt_name)
                    expected = estimate(engine, entry["runs"], prompt_name, mode, size, len(ids),
                                        probe)
                    if expected is None and len(ids) > args.probe_tokens:
                        probe_s = run(policy, ids[:args.probe_tokens], 1, 1, 1, threads)
                        probe = entry["probes"][prompt_name] = {
                            "tokens": args.probe_tokens, "seconds": probe_s,
                            "prefill_tokens_per_s": args.probe_tokens / probe_s}
                        expected = estimate(engine, entry["runs"], prompt_name, mode, size,
                                            len(ids), probe)
                    if expected is not None and expected > args.budget:
                        entry["runs"].append({**row, "skipped": True, "estimated_s": expected})
                        report.save()
                        print(f"{model_name} {engine} t{threads} {prompt_name} {mode} {size}: "
                              f"skipped, at least {expected:.0f}s expected > --budget "
                              f"{args.budget:.0f}s", file=sys.stderr, flush=True)
                        continue
                got = measure(run, policy, ids, *((size, 1) if mode == "batch" else (1, size)),
                              args.tokens, threads)
                entry["runs"].append({**row, **got})
                report.save()
                print(f"{model_name} {engine} t{threads} {prompt_name} {mode} {size}: "
                      f"prefill {got['prefill_s']:.2f}s, {got['tokens_per_s']:.1f} tok/s",
                      file=sys.stderr, flush=True)
        if want_rollout:
            if previous is not None and "sync" in previous:
                entry["mismatch"], entry["sync"] = previous["mismatch"], previous["sync"]
            else:
                entry["mismatch"] = logprob_mismatch(policy, reference, policy.prompt_ids(SHORT),
                                                     max(args.group, 2), args.tokens)
                entry["sync"] = sync_cost(reference, policy.tokenizer,
                                          ENGINES[engine]["quantization"], threads)
            report.save()
        policy.close()


class Report:
    """The JSON report, written whole after every measurement; `earlier` holds the engine
    entries of the report it resumes."""

    def __init__(self, path: Path | None, header: dict[str, Any], resume: bool) -> None:
        self.path, self.header, self.models = path, header, []
        self.previous: dict[tuple, dict[str, Any]] = {}
        if resume and path is not None and path.is_file():
            try:
                old = json.loads(path.read_text())
                old_tokens = old["tokens"]
                entries = [e for r in old["results"] for e in r["engines"]]
            except (ValueError, KeyError, TypeError) as exc:
                raise SystemExit(f"--resume: {path} is not a report of this benchmark ({exc}); "
                                 "give another --out or drop --resume") from None
            if old_tokens != header["tokens"]:
                raise SystemExit(f"--resume: {path} measured --tokens {old_tokens}, not "
                                 f"{header['tokens']}; give the same --tokens or another --out")
            same = {name for name, sha in old.get("prompt_sha256", {}).items()
                    if header["prompt_sha256"].get(name) == sha}  # rows of other prompts go
            for e in entries:
                e["runs"] = [g for g in e.get("runs", []) if g.get("prompt") in same]
            self.previous = {(e["model"], e["engine"], e["threads"]): e for e in entries}

    def earlier(self, model: str, engine: str, threads: int) -> dict[str, Any] | None:
        return self.previous.get((model, engine, threads))

    def start_model(self, entry: dict[str, Any]) -> None:
        self.models.append(entry)

    def add(self, engine_entry: dict[str, Any]) -> None:
        self.models[-1]["engines"].append(engine_entry)
        self.save()

    def to_dict(self, complete: bool = False) -> dict[str, Any]:
        """The report in the results convention: this call's meta, the tables of what is measured
        so far (a report an older version wrote, without them, is continued all the same)."""
        first, *more = tables(self.models, self.header["import_s"])
        return stamp({"tables": more, **self.header, "load_average_after": os.getloadavg(), "complete": complete,
                      "results": self.models}, "policies", first)

    def save(self, complete: bool = False) -> None:
        if self.path is None:
            return
        write_json(self.path, self.to_dict(complete), indent=1)


def bench_model(name: str, root: Path, prompts: dict[str, list], args: argparse.Namespace,
                report: Report) -> None:
    model = get_bundled(name)
    gguf_ready = (root / name / model.gguf_file).is_file()
    _, assemble_s = timed(assemble, model, root)
    hf_ready = is_converted(root / name / "hf", model)
    folder, convert_s = timed(convert, model, root)
    report.start_model({"model": name, "assemble_s": None if gguf_ready else assemble_s,
                        "hf_convert_s": None if hf_ready else convert_s, "engines": []})
    reference = None
    if args.mismatch and any(e.startswith("ct2") for e in args.engines):
        from mleforge.policies.engines.transformers import load_model

        # The trainer's view: float32 transformers, for log-probabilities and the sync.
        reference, _ = load_model(HFConfig(model=str(folder)), device="cpu", dtype="float32")
    for engine in args.engines:
        bench_engine(name, folder, engine, prompts, args, root / "ct2", reference, report)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(BUNDLED), choices=list(BUNDLED))
    parser.add_argument("--engines", nargs="+", default=list(ENGINES), choices=list(ENGINES))
    parser.add_argument("--prompts", nargs="+", default=["short", "improve"],
                        choices=["short", "improve"])
    parser.add_argument("--fresh", action="store_true",
                        help="use an empty temporary cache, so assembly and conversions are timed")
    parser.add_argument("--batches", nargs="+", type=int, default=[1, 4, 8])
    parser.add_argument("--group", type=int, default=4,
                        help="samples of one prompt (a GRPO group); 0 to skip")
    parser.add_argument("--threads", nargs="+", type=int, default=[os.cpu_count() or 1])
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--no-mismatch", dest="mismatch", action="store_false",
                        help="skip the ct2 log-probability gap and weight-sync measurements")
    parser.add_argument("--budget", type=float,
                        help="skip a shape whose prefills alone are expected to take more than "
                             "this many seconds (default: measure everything)")
    parser.add_argument("--probe-tokens", type=int, default=128,
                        help="with --budget: prompt tokens prefilled to estimate an engine's rate "
                             "before its first shape of a longer prompt (default 128)")
    parser.add_argument("--out", type=Path, help="the JSON report, written after every measurement")
    parser.add_argument("--resume", action="store_true",
                        help="keep the measurements of the report at --out and take only the rest")
    args = parser.parse_args()
    if args.tokens < 2:
        parser.error("--tokens must be at least 2 (one token is the prefill)")
    if args.resume and args.out is None:
        parser.error("--resume needs --out (the report to resume)")
    if args.probe_tokens < 1:
        parser.error("--probe-tokens must be at least 1")

    _, import_s = timed(import_torch_transformers)
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="mleforge-bench-") as temp:
        prompts = {"short": SHORT}
        if "improve" in args.prompts:
            prompts["improve"] = improve_prompt(Path(temp))
        prompts = {k: v for k, v in prompts.items() if k in args.prompts}
        header = {"machine": {"cpus": os.cpu_count(), "processor": platform.processor(),
                              "platform": platform.platform()},
                  "environment": backend_environment(),
                  "load_average_before": load_before, "import_s": import_s,
                  "tokens": args.tokens, "temperature": TEMPERATURE, "budget_s": args.budget,
                  "prompt_sha256": {k: digest(v) for k, v in prompts.items()}}
        report = Report(args.out, header, args.resume)
        root = Path(temp) / "models" if args.fresh else models_root()
        for name in args.models:
            bench_model(name, root, prompts, args, report)
    report.save(complete=True)
    print_tables(report.to_dict(complete=True))


def tables(results: list[dict[str, Any]], import_s: float) -> list[dict[str, Any]]:
    """Getting ready, generation speed, and ct2 as a rollout engine: what the run printed."""
    seconds = lambda v: "cached" if v is None else round(v, 1)  # noqa: E731
    stages, speed, rollout = [], [], []
    for r in results:
        for e in r["engines"]:
            ct2 = e["engine"].startswith("ct2")
            stages.append([r["model"], seconds(r["assemble_s"]), seconds(r["hf_convert_s"]), e["engine"], e["threads"],
                           seconds(e["convert_s"]) if ct2 else "-", round(e["load_s"], 1)])
            for g in e["runs"]:
                shape = f"batch {g['size']}" if g["mode"] == "batch" else f"1 x {g['size']}"
                head = [r["model"], e["engine"], e["threads"], g["prompt"], g["prompt_tokens"], shape]
                if g.get("skipped"):
                    probe = e.get("probes", {}).get(g["prompt"])
                    rate = (f", prefill {probe['prefill_tokens_per_s']:.1f} tok/s on "
                            f"{probe['tokens']}" if probe else "")
                    speed.append([*head, f"skipped: >= {g['estimated_s']:.0f} s{rate}", None, None, None])
                    continue
                decode = g["decode_tokens_per_s"]
                speed.append([*head, round(g["prefill_s"], 2), round(g["total_s"], 2), round(g["tokens_per_s"], 1),
                              None if decode is None else round(decode, 1)])
            if "mismatch" in e:
                m, sync = e["mismatch"], e["sync"]
                rollout.append([r["model"], e["engine"], f"{m['mean_abs_token_gap']:.2g}", f"{m['max_abs_token_gap']:.2g}",
                                " ".join(f"{x:+.2f}" for x in m["sequence_log_ratios"]),
                                f"{sync['total_s']:.1f} ({sync['convert_s']:.1f} + {sync['load_s']:.1f})"])
    return [
        table(f"Getting ready (seconds; importing torch + transformers: {import_s:.1f})",
              ["model", "assemble", "GGUF -> hf", "engine", "threads", "-> ct2", "load"], stages),
        table("Generation on CPU (sampling, fixed length)",
              ["model", "engine", "threads", "prompt", "prompt tokens", "shape", "prefill s", "total s", "tokens/s",
               "decode tokens/s"], speed),
        table("ct2 as a GRPO rollout engine (short prompt, temperature 1)",
              ["model", "engine", "mean |dlogp|/token", "max |dlogp|", "sequence log-ratios", "sync s (convert + load)"],
              rollout),
    ]


if __name__ == "__main__":
    main()
