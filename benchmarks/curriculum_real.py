"""Uniform against Learnability-Potential sampling on a REAL model: `mleforge train` runs, seed by seed.

    python benchmarks/curriculum_real.py --tiny --tasks titanic --eval-tasks diabetes --seeds 2 --steps 1 \\
        --group-size 2 --expert-steps 3 --stepwise-states 2 --sft-steps 1 \\
        --work bench-out/currreal-tiny --out bench-out/currreal-tiny.json                  # plumbing, minutes
    python benchmarks/curriculum_real.py --seeds 3 --steps 4 --eval-tasks diabetes,telco-churn \\
        --work bench-out/currreal --out bench-out/currreal.json                            # the bundled Qwen, hours

The evaluation tasks are the main job's (the cpu preset's `eval_tasks`): tasks whose expert
states leave headroom, so that a run's model can show an improvement there.

The simulated comparison is benchmarks/curriculum.py; this one trains. For each seed and
each sampler (uniform, learnability) it runs `mleforge train` (`mleforge.train.recipe.train`,
the `cpu` preset with the flags given here on top) with the same budget: `--steps` steps of
`--groups-per-step` states x `--group-size` rollouts, the same seed, the same warm start,
the same seed journals. The runs differ only in `sampler`.

What is shared, made once in `--work` and reused by every run (and by a later call):

    collect/          the template expert's episodes on the training tasks (compact prompts),
                      exactly the collect of `mleforge train --sft auto`: its journals seed
                      every run's buffer (`journals`), its samples are the warm start's
    sft/              the SFT warm start (`--sft auto`: made here once, as `mleforge train`
                      makes it; `--sft PATH`: that checkpoint; `--sft none`: the model itself)
    stepwise/expert/  template-expert journals of the eval tasks; the step-wise evaluation's
                      states are drawn from them with `--eval-seed`, the same for every run
    stepwise/start.json                 the step-wise evaluation of the warm start (every run's start)
    stepwise/after-<sampler>-seed<k>.json   the same evaluation of that run's final model
    runs/<sampler>-seed<k>/   a `mleforge train` run directory (GRPO steps only: its own
                      step-wise evaluation is off); a run cut short is continued with the
                      trainer's own resume, a finished one is read back, never redone
    bench.json        the settings the runs were made with: another call on this --work
                      must give the same ones (more --seeds only add runs)

Figures, per run, then mean +/- SEM over seeds (SEM = sample std with ddof 1 / sqrt(n),
`mleforge.eval.aggregate.mean_sem`), and learnability - uniform paired by seed (the same
seed gives both samplers the same warm start, seeds and generation seeds, so the
difference is taken seed by seed: its mean and the SEM of the per-seed differences):

    frac_zero_std_groups    groups (over all steps) whose scored rewards all tie: zero advantage
    reward_per_rollout      the mean reward of the run's scored rollouts
    eval_format_error_rate  after training: completions with no parsable action, over the states
    eval_valid_rate         after training: completions whose run wrote a valid submission
    eval_mean_reward        after training: the reward module's mean total

`--tiny` trains a tiny random model built here (tests/train/tiny.py, no download; its
completions are format errors, so it measures the plumbing and the framework's per-step
costs, not learning). Writes JSON to `--out` (benchmarks/_record.py's convention) and
prints the tables; the data root is $MLEFORGE_DATA.
"""

from __future__ import annotations

import os

# As the CLI does (mleforge.cli.main): OpenMP threads sleep when idle, set before torch loads.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse
import gc
import json
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT / "benchmarks") not in sys.path:  # _record, beside this script
    sys.path.append(str(ROOT / "benchmarks"))
from _record import invocation, print_table, table, write_result  # noqa: E402

SAMPLERS = ("uniform", "learnability")
# (key, what the table calls it): training figures, then the step-wise evaluation after training.
FIGURES = (
    ("frac_zero_std_groups", "tied groups (frac)"),
    ("reward_per_rollout", "reward / rollout"),
    ("eval_format_error_rate", "after: format-error rate"),
    ("eval_valid_rate", "after: valid rate"),
    ("eval_mean_reward", "after: mean reward"),
)
EVAL_FIGURES = {"eval_format_error_rate": "format_error_rate", "eval_valid_rate": "valid_rate",
                "eval_mean_reward": "mean_reward"}
BENCH_FILE = "bench.json"
# flag -> TrainConfig path (dotted: a section's field); None flags leave the preset's value.
FLAGS = {
    "model": "model.spec", "threads": "model.threads", "tasks": "tasks", "eval_tasks": "eval_tasks",
    "steps": "steps", "group_size": "group_size", "groups_per_step": "groups_per_step",
    "micro_batch": "micro_batch", "max_new_tokens": "max_new_tokens", "sft_steps": "sft.max_steps",
    "sft_max_length": "sft.max_length", "expert_steps": "collect.steps", "stepwise_states": "stepwise.states",
    "executor": "sandbox.executor", "generation": "generation.backend", "engine": "stepwise.engine",
}


# --- the math: pure functions ----------------------------------------------------------------------


def over_seeds(values: Mapping[int, float | None]) -> dict[str, Any]:
    """One sampler's figure over seeds: {"mean", "sem", "n", "per_seed"}; a seed whose run has
    no value (every rollout lost) is left out of the mean, and kept in per_seed as None."""
    from mleforge.eval.aggregate import mean_sem

    kept = [values[s] for s in sorted(values) if values[s] is not None]
    return {**mean_sem(kept), "per_seed": {str(s): values[s] for s in sorted(values)}}


def paired_difference(uniform: Mapping[int, float | None], learnability: Mapping[int, float | None]) -> dict[str, Any]:
    """learnability - uniform seed by seed, over the seeds both have a value for: the mean
    difference and the SEM of the differences ({"mean", "sem", "n", "per_seed"})."""
    from mleforge.eval.aggregate import mean_sem

    seeds = sorted(s for s in set(uniform) & set(learnability)
                   if uniform[s] is not None and learnability[s] is not None)
    diffs = {s: learnability[s] - uniform[s] for s in seeds}
    return {**mean_sem([diffs[s] for s in seeds]), "per_seed": {str(s): diffs[s] for s in seeds}}


def run_figures(lines: Sequence[Any]) -> dict[str, Any]:
    """A run's training figures from its rollouts (mleforge.train.records.RolloutLine): groups
    are (step, group) pairs; the figures are mleforge.train.metrics' own, over the whole run."""
    from mleforge.train.metrics import frac_tied_groups, outcome_rates, reward_summary

    groups: dict[tuple[int, int], list[float | None]] = {}
    for line in lines:
        groups.setdefault((line.step, line.group), []).append(line.reward)
    mean, _ = reward_summary([line.reward for line in lines])
    rates = outcome_rates([line.outcome for line in lines])
    return {"frac_zero_std_groups": frac_tied_groups(list(groups.values())), "reward_per_rollout": mean,
            "rollouts": len(lines), "scored": sum(line.reward is not None for line in lines),
            "groups": len(groups), "train_valid_rate": rates["valid_rate"],
            "train_format_error_rate": rates["format_error_rate"]}


def eta_seconds(walls: Sequence[float], remaining: int) -> float | None:
    """The time the remaining runs take at the mean wall time of those done (None: none done)."""
    return sum(walls) / len(walls) * remaining if walls else None


# --- reading a run ---------------------------------------------------------------------------------


def read_rollouts(run_dir: Path) -> list[Any]:
    from mleforge.runs import ROLLOUTS_DIR
    from mleforge.train.records import RolloutLine

    lines = []
    for path in sorted((run_dir / ROLLOUTS_DIR).glob("step-*.jsonl"), key=lambda p: int(p.stem.split("-")[1])):
        lines += [RolloutLine.from_dict(json.loads(x)) for x in path.read_text(encoding="utf-8").splitlines() if x]
    return lines


def step_costs(run_dir: Path) -> dict[str, float]:
    """Mean seconds per GRPO step of generation, execution and update (metrics.jsonl)."""
    from mleforge.runs import METRICS_FILE

    rows = [json.loads(x) for x in (run_dir / METRICS_FILE).read_text(encoding="utf-8").splitlines() if x]
    return {key: round(sum(r[key] for r in rows) / len(rows), 3) for key in ("gen_s", "exec_s", "update_s")}


def eval_figures(result: Mapping[str, Any]) -> dict[str, float | None]:
    return {key: result["metrics"][name]["mean"] for key, name in EVAL_FIGURES.items()}


# --- set-up ----------------------------------------------------------------------------------------


def overrides(args: argparse.Namespace, model: str) -> dict[str, Any]:
    """The TrainConfig overrides of the flags given (the cpu preset keeps the rest)."""
    from mleforge.config import set_dotted

    out: dict[str, Any] = {"model": {}}
    for flag, key in FLAGS.items():
        value = model if flag == "model" else getattr(args, flag)
        if value is not None:
            out = set_dotted(out, key, value)
    return out


def tiny_spec(work: Path) -> str:
    """A tiny random Llama in <work>/tiny-model, built once (tests/train/tiny.py)."""
    folder = work / "tiny-model"
    if not (folder / "config.json").is_file():
        sys.path.insert(0, str(ROOT))
        from tests.train.tiny import tiny_model

        tiny_model(folder)
    return f"hf:{folder}"


def base_config(args: argparse.Namespace, work: Path) -> Any:
    """The config every run shares (seeded with --eval-seed: the step-wise evaluation's and the
    warm start's seed); a run replaces only sampler, seed, sft and journals."""
    from mleforge.train.config import TrainConfig

    model = tiny_spec(work) if args.tiny else args.model
    given = overrides(args, model)
    if args.tiny:  # the tiny byte-level tokenizer makes ~4,000-token prompts; ct2 is for real models
        given.setdefault("sft", {}).setdefault("max_length", 16000)
        given.setdefault("stepwise", {}).setdefault("engine", "transformers")
    stepwise = {**given.pop("stepwise", {}), "enabled": True}
    return TrainConfig.preset_config("cpu", **given, warm_start=args.sft, seed=args.eval_seed, stepwise=stepwise)


def check_work(work: Path, settings: dict[str, Any]) -> None:
    """A --work folder holds one benchmark: the same settings continue it, others are refused."""
    from mleforge.errors import ConfigError
    from mleforge.utils.atomic import atomic_write

    path = work / BENCH_FILE
    if path.is_file():
        saved = json.loads(path.read_text(encoding="utf-8"))
        if saved != settings:
            changed = sorted(k for k in set(saved) | set(settings) if saved.get(k) != settings.get(k))
            raise ConfigError(f"{work} holds a benchmark made with other settings (different "
                              f"{', '.join(changed)}); give the same ones to continue it, or another --work")
        return
    work.mkdir(parents=True, exist_ok=True)
    atomic_write(path, json.dumps(settings, indent=1, sort_keys=True))


def shared_executor(config: Any, work: Path) -> Any:
    """The executor of the shared collect and the evaluations: the one `mleforge train` picks
    (auto: `make_executor("auto")`, the warm pool wherever it isolates its runs,
    else local), behind a result cache (an identical completion of the same state is graded
    once across all the runs)."""
    from mleforge.sandbox import CachingExecutor, make_executor

    sandbox = config.sandbox
    options = {} if sandbox.isolation is None else {"isolation": sandbox.isolation}
    executor = make_executor(sandbox.executor, **options)
    return CachingExecutor(executor, work / "results.sqlite")


def warm_start(args: argparse.Namespace, plan: Any, work: Path, registry: Any, executor: Any,
               progress: bool) -> tuple[str, str, str]:
    """(every run's `sft`, its `journals`, the model spec GRPO starts from), made once."""
    import mleforge.train.warm_start as warm
    from mleforge.runs import SFT_DIR

    journals = args.journals
    collected = None
    if plan.config.warm_start_mode == "auto" or journals is None:
        collected = warm.collect_expert(plan, work, registry, executor, progress)
        journals = journals or collected.journals_dir
    spec = warm.warm_start(plan, work, collected, progress)  # auto: <work>/sft, as `mleforge train` makes it
    sft = str(work / SFT_DIR) if plan.config.warm_start_mode == "auto" else plan.config.warm_start
    return sft, str(journals), spec


def train_one(config: Any, folder: Path, registry: Any, progress: bool) -> Any:
    """One (sampler, seed) run: started, continued after a kill, or read back when done."""
    from mleforge.runs import CONFIG_FILE
    from mleforge.train.recipe import resume, train

    if (folder / CONFIG_FILE).is_file():
        return resume(folder, registry=registry, progress=progress)
    return train(config, folder, registry=registry, progress=progress)


# --- the benchmark ---------------------------------------------------------------------------------


def run_benchmark(args: argparse.Namespace, *, registry: Any = None, progress: bool = True) -> dict[str, Any]:
    from mleforge.cli.output import err_console
    from mleforge.errors import ConfigError
    from mleforge.train import recipe

    if args.seeds < 2:
        raise ConfigError(f"--seeds: got {args.seeds}; a standard error over seeds needs at least 2 (3 or more "
                          "for a figure worth reporting)")
    if args.eval_tasks is not None and not args.eval_tasks.strip():
        raise ConfigError("--eval-tasks: the comparison includes the step-wise evaluation; name tasks the runs do "
                          "not train on (or leave the flag out for the preset's)")
    if registry is None:
        from mleforge.tasks.registry import TaskRegistry

        registry = TaskRegistry()
    started = time.perf_counter()
    work = Path(args.work).expanduser().resolve()
    work.mkdir(parents=True, exist_ok=True)
    base = base_config(args, work)
    check_work(work, {**base.to_dict(), "journals": args.journals})
    plan = recipe.preflight(base, registry)  # every check that needs no model, before anything heavy
    from mleforge.tasks.preparation import prepare

    for task in (*plan.tasks, *plan.eval_tasks):
        prepare(task)
    executor = shared_executor(base, work)
    runs: list[dict[str, Any]] = []
    try:
        shared_started = time.perf_counter()
        sft, journals, start_spec = warm_start(args, plan, work, registry, executor, progress)
        start = recipe.stepwise_evaluation(plan, work, start_spec, "start", registry, executor, progress)
        shared_s = round(time.perf_counter() - shared_started, 1)
        todo = [(seed, sampler) for seed in range(args.first_seed, args.first_seed + args.seeds) for sampler in SAMPLERS]
        walls: list[float] = []
        for i, (seed, sampler) in enumerate(todo):
            label = f"{sampler}-seed{seed}"
            eta = eta_seconds(walls, len(todo) - i)
            if progress:
                err_console.print(f"[bold][{i + 1}/{len(todo)}] {label}[/]  elapsed "
                                  f"{time.perf_counter() - started:.0f} s" + ("" if eta is None else
                                                                            f", ETA {eta:.0f} s"), highlight=False)
            run_started = time.perf_counter()
            folder = work / "runs" / label
            config = base.replace(sampler={"kind": sampler}, seed=seed, warm_start=sft, journals=journals, stepwise={"enabled": False})
            result = train_one(config, folder, registry, progress)
            gc.collect()  # the trained model's memory, before the evaluation loads the result
            after = recipe.stepwise_evaluation(plan, work, f"hf:{result.final_model}", f"after-{label}", registry,
                                               executor)  # its states' journals were made for the start
            wall = time.perf_counter() - run_started
            if wall > 5.0:  # a run read back from disk says nothing of how long the next one takes
                walls.append(wall)
            runs.append({"sampler": sampler, "seed": seed, "run_dir": str(folder), "steps": result.steps,
                         **run_figures(read_rollouts(folder)), **eval_figures(after),
                         "train_wall_s": result.wall_s, "step_costs": step_costs(folder),
                         "eval_timing": after.get("timing", {})})
            gc.collect()
    finally:
        executor.close()
    config = plan.config
    budget = config.steps * config.groups_per_step * config.group_size
    samplers, difference = summarize(runs)
    return {
        "benchmark": "curriculum_real", "simulation": False,
        "config": {**{k: v for k, v in vars(args).items() if k != "out"}, "model_spec": config.model.spec,
                   "tasks_resolved": [t.id for t in plan.tasks], "eval_tasks_resolved": [t.id for t in plan.eval_tasks],
                   "steps": config.steps, "group_size": config.group_size, "groups_per_step": config.groups_per_step,
                   "max_new_tokens": config.max_new_tokens, "sft_resolved": sft, "journals_resolved": journals,
                   "start_model": start_spec, "stepwise_states": config.stepwise.states},
        "rollouts_per_run": budget,
        "start_eval": eval_figures(start) | {"n_states": start.get("n_states"), "timing": start.get("timing", {})},
        "runs": runs, "samplers": samplers, "difference": difference,
        "shared_s": shared_s, "seconds": round(time.perf_counter() - started, 1),
    }


def summarize(runs: Sequence[Mapping[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Per sampler, each figure over seeds; and learnability - uniform, paired by seed."""
    values = {sampler: {key: {r["seed"]: r[key] for r in runs if r["sampler"] == sampler} for key, _ in FIGURES}
              for sampler in SAMPLERS}
    samplers = {sampler: {key: over_seeds(values[sampler][key]) for key, _ in FIGURES} for sampler in SAMPLERS}
    difference = {key: paired_difference(values["uniform"][key], values["learnability"][key]) for key, _ in FIGURES}
    return samplers, difference


def pm(figure: Mapping[str, Any], signed: bool = False) -> str:
    if figure.get("mean") is None:
        return "–"
    mean = f"{figure['mean']:+.3f}" if signed else f"{figure['mean']:.3f}"
    return mean + ("" if figure.get("sem") is None else f" ± {figure['sem']:.3f}") + f" (n={figure['n']})"


def tables(result: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The comparison (each figure per sampler, and the paired difference), then every run."""
    c = result["config"]
    title = (f"uniform vs learnability on {c['model_spec']}: {c['seeds']} seeds x {c['steps']} steps x "
             f"{c['groups_per_step']} x G={c['group_size']} ({result['rollouts_per_run']} rollouts per run); "
             f"mean ± SEM over seeds, difference paired by seed")
    rows = [[name, pm(result["samplers"]["uniform"][key]), pm(result["samplers"]["learnability"][key]),
             pm(result["difference"][key], signed=True)] for key, name in FIGURES]
    keys = ("sampler", "seed", "rollouts", "scored", "frac_zero_std_groups", "reward_per_rollout",
            "eval_format_error_rate", "eval_valid_rate", "eval_mean_reward", "train_wall_s")
    return [table(title, ["figure", "uniform", "learnability", "learnability - uniform"], rows),
            table("runs", keys, [[r[k] for k in keys] for r in result["runs"]])]


def print_report(record: Mapping[str, Any]) -> None:
    comparison, runs = record["table"], *record["tables"]
    start = record["start_eval"]
    print_table(comparison)
    print(f"start (the warm start, before GRPO): format-error rate {start['eval_format_error_rate']}, valid rate "
          f"{start['eval_valid_rate']}, mean reward {start['eval_mean_reward']} over {start['n_states']} states")
    print_table(runs)
    costs = [r["step_costs"] for r in record["runs"]]
    print("per GRPO step (mean over runs): " + ", ".join(
        f"{k} {sum(x[k] for x in costs) / len(costs):.2f}" for k in ("gen_s", "exec_s", "update_s"))
        + f"; shared set-up {record['shared_s']} s; total {record['seconds']} s")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, help="write the figures as JSON here")
    p.add_argument("--work", default="bench-out/curriculum_real",
                   help="where the shared warm start, the runs and the evaluations live (reused: resumable)")
    p.add_argument("--seeds", type=int, default=3, help="seeds per sampler (at least 2)")
    p.add_argument("--first-seed", type=int, default=0)
    p.add_argument("--eval-seed", type=int, default=0,
                   help="the seed of the shared parts: the evaluation's states and sampling, the warm start")
    p.add_argument("--model", default=None, help="bundled:NAME | hf:PATH (default: the cpu preset's)")
    p.add_argument("--tiny", action="store_true", help="a tiny random model built here instead of --model")
    p.add_argument("--sft", default="auto", help="auto (made once in --work) | none | PATH of an `mleforge sft` run")
    p.add_argument("--journals", help="a folder of collected runs to seed every buffer (default: the shared collect)")
    # None: the cpu preset's value (mleforge.train.config), whatever it is when the benchmark runs.
    for flag, kind, what in (
        ("--tasks", str, "training tasks: lite | all | ids"), ("--eval-tasks", str, "step-wise evaluation tasks"),
        ("--steps", int, "GRPO steps per run"), ("--group-size", int, "rollouts per state (G)"),
        ("--groups-per-step", int, "states per step"), ("--micro-batch", int, "sequences per forward/backward"),
        ("--max-new-tokens", int, "completion length cap"), ("--sft-steps", int, "optimizer steps of --sft auto"),
        ("--sft-max-length", int, "token cap of a warm-start sample"),
        ("--expert-steps", int, "steps of each template-expert episode"),
        ("--stepwise-states", int, "states of the step-wise evaluation"),
        ("--executor", str, "auto | local | pool | ray"), ("--generation", str, "auto | trl | vllm | ct2 | a registered engine"),
        ("--engine", str, "the evaluation's generation engine: auto | transformers | ct2"),
        ("--threads", int, "torch CPU threads"),
    ):
        p.add_argument(flag, type=kind, default=None, help=f"{what} (default: the cpu preset's)")
    return p


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """The benchmark, its JSON to --out (benchmarks/_record.py's convention, written atomically:
    the figures of hours of runs are never left half-written) and its report; the record."""
    from mleforge.errors import MleforgeError

    args = build_parser().parse_args(argv)
    try:
        result = run_benchmark(args)
    except MleforgeError as exc:
        raise SystemExit(f"error: {exc}") from None
    first, *more = tables(result)
    record = write_result(args.out, "curriculum_real", first, argv=invocation(__file__, argv), tables=more, **result)
    print_report(record)
    if args.out:
        print(f"wrote {args.out}")
    return record


if __name__ == "__main__":
    main()
