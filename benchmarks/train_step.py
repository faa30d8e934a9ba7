"""Time per GRPO step, split into generation, execution and update, and the framework's own share.

    python benchmarks/train_step.py --tiny --out bench-out/train_step.json            # plumbing, minutes
    python benchmarks/train_step.py --model bundled:qwen2.5-coder-0.5b --steps 3 \\
        --out bench-out/train_step_qwen.json                                           # the real main job's step
    python benchmarks/train_step.py --model bundled:smollm2-135m --generation trl,ct2,ct2:int8 \\
        --skip-execution --out bench-out/train_step_engines.json                       # each rollout engine

1. Steps: `--steps` real GRPO steps of `mleforge train` (the run's own prompts, LoRA) on
   `--task` for each `--generation` (trl: TRL's own generate; ct2: CTranslate2 rollouts at
   the training weights' type; ct2:int8 and the like: at that quantization), each step timed
   from its start to the end of its feedback; per step: generation, the rollout engine's
   weight sync (ct2: convert and load), execution (the reward: parse, run, grade), update
   (loss, backward, optimizer), and the rest (the framework: drawing and rendering the
   batch, feeding the rollouts back to the buffer, writing rollouts and metrics). The
   framework's overhead is everything but generation, sync and update, as a share of the
   step (the goal: under 10%), and the share of the rest alone. Each engine's run has the
   same seed, so its first step draws the same state.
2. Execution: one group of `--group-size` real expert completions (the template expert's
   scripts for the task's draft state) through the executing reward, for each executor
   (local, pool), with 1 and 2 workers, with no result cache, and with one (a miss, then
   the same group again: hits).

`--tiny` trains a tiny random model built here (no download; its completions are format
errors, so its steps execute nothing: part 2 measures execution). The data root is
$MLEFORGE_DATA. Writes JSON to --out (benchmarks/_record.py's convention) and prints tables.
"""

from __future__ import annotations

import os

# As the CLI does (mleforge.cli.main): OpenMP threads sleep when idle, set before torch loads.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from _record import invocation, print_tables, table, write_result  # noqa: E402


def step_timer():
    from transformers import TrainerCallback

    class StepTimer(TrainerCallback):
        """Added after the run's own callbacks: its on_step_end runs after the feedback."""

        def __init__(self) -> None:
            self.began: float = 0.0
            self.walls: dict[int, float] = {}

        def on_step_begin(self, args, state, control, **kwargs):
            self.began = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            self.walls[state.global_step - 1] = time.perf_counter() - self.began

    return StepTimer()


def generation_choice(text: str) -> tuple[str, str | None]:
    """`trl`, `ct2` or `ct2:QUANTIZATION` -> (generation, rollout quantization)."""
    generation, _, quantization = text.partition(":")
    if generation not in ("trl", "ct2") or (quantization and generation != "ct2"):
        raise SystemExit(f"--generation: got {text!r}; give trl, ct2 or ct2:QUANTIZATION (ct2:int8), comma-separated")
    return generation, quantization or None


def time_steps(args, registry, work: Path, choice: str, model: str) -> list[dict]:
    from mleforge.train.config import TrainConfig
    from mleforge.train.recipe import train

    generation, quantization = generation_choice(choice)
    config = TrainConfig.preset_config(
        "cpu", model={"spec": model, "threads": args.threads}, tasks=args.task, eval_tasks="", steps=args.steps,
        group_size=args.group_size, groups_per_step=args.groups_per_step, micro_batch=args.micro_batch,
        max_new_tokens=args.max_new_tokens, warm_start="none", journals=args.journals, collect={"steps": 4},
        sandbox={"executor": args.executor},
        generation={"backend": generation, "rollout_quantization": quantization}, stepwise={"enabled": False},
    )
    timer = step_timer()
    result = train(config, work / f"run-{choice.replace(':', '-')}", registry=registry, progress=False,
                   callbacks=[timer])
    rows = []
    for line in (Path(result.run_dir) / "metrics.jsonl").read_text().splitlines():
        m = json.loads(line)
        step_s = timer.walls[m["step"]]
        sync = m.get("sync_s", 0.0)
        rest = max(0.0, step_s - m["gen_s"] - sync - m["exec_s"] - m["update_s"])
        rows.append({"generation": choice, "step": m["step"], "step_s": round(step_s, 3), "gen_s": m["gen_s"],
                     "sync_s": sync, "exec_s": m["exec_s"], "update_s": m["update_s"], "rest_s": round(rest, 3),
                     "tokens": m["tokens"], "gen_tokens_per_s": round(m["tokens"] / m["gen_s"], 2) if m["gen_s"] else None,
                     "overhead_share": round((step_s - m["gen_s"] - sync - m["update_s"]) / step_s, 4),
                     "rest_share": round(rest / step_s, 4), "valid_rate": m["valid_rate"],
                     "format_error_rate": m["format_error_rate"]})
    return rows


def summarize(steps: list[dict]) -> list[dict]:
    """Per engine, the mean of each figure over its steps after the first (the first also pays
    for TRL's and the engine's warm-up; with one step, that step)."""
    out = []
    for choice in dict.fromkeys(row["generation"] for row in steps):
        rows = [row for row in steps if row["generation"] == choice]
        rows = rows[1:] or rows
        mean = {k: round(sum(row[k] for row in rows) / len(rows), 3)
                for k in ("step_s", "gen_s", "sync_s", "exec_s", "update_s", "tokens")}
        out.append({"generation": choice, "steps": len(rows), **mean,
                    "gen_tokens_per_s": round(mean["tokens"] / mean["gen_s"], 2) if mean["gen_s"] else None})
    return out


def expert_group(task, registry, n: int) -> list[str]:
    from mleforge.agent.prompts import render_prompt
    from mleforge.agent.state import State
    from mleforge.policies import SamplingConfig, make_policy

    state = State.draft(task.id, direction=task.spec.direction)
    policy = make_policy("template", registry=registry)
    texts = []
    for k in range(n):  # one call per seed: the template expert varies its approach by seed
        (completion,) = policy.generate([render_prompt(state, task)], n=1, sampling=SamplingConfig(seed=k),
                                        states=[state])[0]
        texts.append(completion.text)
    return texts


def time_group(reward, texts, state) -> float:
    started = time.perf_counter()
    asyncio.run(reward(prompts=[[]] * len(texts), completions=[[{"role": "assistant", "content": t}] for t in texts],
                       state_id=[state.state_id] * len(texts), group=[0] * len(texts),
                       trainer_state=SimpleNamespace(global_step=0), completion_ids=[[0]] * len(texts)))
    elapsed = time.perf_counter() - started
    rollouts, _ = reward.take(0)
    bad = [r.outcome.node.error for r in rollouts if r.outcome is None or r.outcome.node.outcome != "valid"]
    if bad:
        raise SystemExit(f"an expert completion did not run validly: {bad[0]}")
    return elapsed


def time_execution(args, task, registry, work: Path) -> list[dict]:
    from mleforge.agent.state import State
    from mleforge.sandbox import CachingExecutor, make_executor
    from mleforge.train.grpo.executing_reward import ExecutingReward

    texts = expert_group(task, registry, args.group_size)
    state = State.draft(task.id, direction=task.spec.direction)
    rows = []
    for kind in args.executors.split(","):
        for workers in (1, 2):
            for cache in (False, True):
                inner = make_executor(kind)
                executor = CachingExecutor(inner, work / f"cache-{kind}-{workers}.sqlite") if cache else inner
                reward = ExecutingReward({task.id: task}, executor, lambda step: {state.state_id: state},
                                         max_workers=workers)
                try:
                    warm = inner.run("pass\n", task)  # a warm pool's zygote starts once, not per group
                    inner.discard(warm)
                    first = time_group(reward, texts, state)
                    again = time_group(reward, texts, state) if cache else None
                finally:
                    reward.close()
                    executor.close()
                rows.append({"executor": kind, "workers": workers, "cache": cache, "group_s": round(first, 3),
                             "per_rollout_s": round(first / len(texts), 3),
                             "cached_group_s": None if again is None else round(again, 4)})
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="bundled:qwen2.5-coder-0.5b")
    parser.add_argument("--tiny", action="store_true", help="a tiny random model built here instead of --model")
    parser.add_argument("--task", default="titanic")
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--groups-per-step", type=int, default=1)
    parser.add_argument("--micro-batch", type=int, help="sequences per forward/backward (default: one group)")
    parser.add_argument("--max-new-tokens", type=int, default=160)
    parser.add_argument("--executor", default="pool", help="the executor of the training steps")
    parser.add_argument("--executors", default="local,pool", help="executors of part 2")
    parser.add_argument("--journals", help="collected runs to seed from (default: the template expert, 4 steps)")
    parser.add_argument("--threads", type=int, help="torch CPU threads")
    parser.add_argument("--generation", default="trl",
                        help="rollout engines to time, comma-separated: trl, ct2, ct2:QUANTIZATION (default trl)")
    parser.add_argument("--skip-steps", action="store_true", help="part 2 only")
    parser.add_argument("--skip-execution", action="store_true", help="part 1 only")
    parser.add_argument("--out", default="bench-out/train_step.json")
    args = parser.parse_args(argv)
    if args.skip_steps and args.skip_execution:
        parser.error("--skip-steps and --skip-execution leave nothing to measure; give one of them at most")

    from mleforge.tasks.preparation import prepare
    from mleforge.tasks.registry import TaskRegistry

    registry = TaskRegistry()
    task = registry.get(args.task)
    prepare(task)
    choices = [c.strip() for c in args.generation.split(",") if c.strip()]
    for choice in choices:
        generation_choice(choice)  # refused before anything runs
    with tempfile.TemporaryDirectory(prefix="mleforge-train-bench-") as tmp:
        work = Path(tmp)
        model = args.model
        if args.tiny and not args.skip_steps:
            sys.path.insert(0, str(ROOT))
            from tests.train.tiny import tiny_model

            model = f"hf:{tiny_model(work / 'tiny')}"
        steps = [] if args.skip_steps else [row for c in choices for row in time_steps(args, registry, work, c, model)]
        execution = [] if args.skip_execution else time_execution(args, task, registry, work)
    engines = summarize(steps) if steps else []
    first, *more = tables(args, steps, engines, execution)
    record = write_result(args.out, "train_step", first, argv=invocation(__file__, argv), tables=more,
                          config={k: v for k, v in vars(args).items() if k != "out"}, steps=steps, engines=engines,
                          execution=execution)
    print_tables(record)
    print(f"wrote {args.out}")


def tables(args: argparse.Namespace, steps: list[dict], engines: list[dict], execution: list[dict]) -> list[dict]:
    """The steps and their means per engine (part 1), then the execution of a group (part 2)."""
    out = []
    if not args.skip_steps:
        keys = ("generation", "step", "step_s", "gen_s", "sync_s", "exec_s", "update_s", "rest_s", "overhead_share",
                "rest_share", "tokens", "gen_tokens_per_s")
        out.append(table(f"GRPO steps ({'tiny model' if args.tiny else args.model}, {args.groups_per_step} x "
                         f"{args.group_size} rollouts, {args.max_new_tokens} new tokens)", keys,
                         [[row[k] for k in keys] for row in steps]))
        keys = ("generation", "steps", "step_s", "gen_s", "sync_s", "exec_s", "update_s", "tokens", "gen_tokens_per_s")
        out.append(table("per engine: mean over the steps after the first (with one step: that step)", keys,
                         [[row[k] for k in keys] for row in engines]))
    if not args.skip_execution:
        keys = ("executor", "workers", "cache", "group_s", "per_rollout_s", "cached_group_s")
        out.append(table(f"executing one group of {args.group_size} expert completions ({args.task})", keys,
                         [[row[k] for k in keys] for row in execution]))
    return out


if __name__ == "__main__":
    main()
