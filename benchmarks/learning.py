"""Does GRPO learn? The warm start against the warm start plus N GRPO steps, seed by seed, with a
null control, on tasks the runs do not train on.

    python benchmarks/learning.py --tiny --tasks titanic --eval-tasks diabetes --steps 2 --evals 2 --seeds 1 \\
        --group-size 2 --expert-steps 3 --sft-steps 1 --stepwise-states 2 --probe-states 2 --eval-seeds 1 \\
        --work bench-out/learning-tiny --out bench-out/learning-tiny.json      # plumbing, minutes
    python benchmarks/learning.py --steps 32 --evals 4 --seeds 3 --eval-seeds 4 --stepwise-states 24 \\
        --probe-states 16 --work bench-out/learning --out bench-out/learning.json  # the bundled Qwen, hours

For each training seed, two `mleforge train` runs (the cpu preset, the flags given here on top)
from one shared warm start (made once in --work, as benchmarks/curriculum_real.py makes it):

    grpo   N GRPO steps
    null   the same, with each group's rewards permuted before the advantages (TrainConfig.
           shuffle_rewards): every update has GRPO's size and noise and no link between a
           completion and its reward. Not lr 0: at lr 0 the weights do not move and the paired
           difference is 0 by construction, which says nothing of what moving them does; the
           shuffled null is what a "GRPO learned" effect must beat.

Every `--steps / --evals` steps a checkpoint is kept and evaluated (the last is the final model):

    eval    the evaluation tasks' states (`--eval-tasks`, never trained on; drawn as the training
            run's step-wise evaluation draws them), one completion each at `--eval-seeds`
            sampling seeds: after - start, paired by state (mleforge.eval.paired: each state's
            mean over seeds, then a t-interval over states), over all states and over those
            with headroom
    probe   a fixed probe set of TRAINING-task states held apart from the buffer's seeds
            (`--probe-states`), the same way: the training reward, off the states trained on

The goal figure: the paired 95% CI of (after GRPO - warm start) on the evaluation tasks at the
last checkpoint. Over seeds it is reported twice: pooled (each state's values over every seed
and sampling seed: the evaluation's noise) and over training seeds (each seed's mean
difference, a t-interval with seeds - 1 degrees of freedom: the training's noise too); and
grpo - null, the same two ways (by state, pooled; and each seed's grpo run against its own null
run, the seed as the unit).

Resumable per run: each run is kept in --out once evaluated (under "partial" until its seed's
other run is too), and a seed's entry is appended when both are, and skipped when present; a
later call with more --seeds adds seeds; runs and evaluations cut short continue from <work>. A
later call may have a fresh --work (another session, say: --out is all that is kept): it makes
the shared start again and goes on only where it is the same, the warm start's weights and the
buffer's seed states bit for bit (`shared_start` in --out), so that its runs pair with the ones
before; it reuses the warm start's evaluation kept in --out (`start_evaluations`) instead of
sampling it again. JSON to --out (benchmarks/_record.py's convention at every write: meta and
the table of the seeds finished), a table, and a plot (<out>.png) where matplotlib is installed.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as the CLI does, before torch loads

import argparse
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _learning_runs as shared_runs  # noqa: E402
from _record import invocation  # noqa: E402

ARMS = {"grpo": {}, "null": {"shuffle_rewards": True}}  # arm -> its TrainConfig changes
PARTIAL = shared_runs.PARTIAL
checkpoint_steps = shared_runs.checkpoint_steps


def run_config(base: Any, shared: Any, args: argparse.Namespace, seed: int, arm: str) -> Any:
    """One arm's TrainConfig: its checkpoints kept at every evaluated step."""
    return shared_runs.run_config(base, shared, args, seed, ARMS[arm])


# --- over seeds --------------------------------------------------------------------------------------


def pooled(start: Mapping[str, Sequence[float]], afters: Sequence[Mapping[str, Sequence[float]]]) -> dict[str, Any]:
    """after - start paired by state, each state's after values pooled over the seeds' runs."""
    from mleforge.eval.paired import paired_difference

    units = sorted(set(start).intersection(*afters)) if afters else []
    b = {u: [v for after in afters for v in after[u]] for u in units}
    return paired_difference({u: start[u] for u in units}, b).to_dict()


def over_seeds(diffs: Mapping[str, float | None]) -> dict[str, Any]:
    """The seeds' mean differences as units: their mean and a t-interval over seeds."""
    from mleforge.eval.paired import paired_difference

    kept = {s: d for s, d in diffs.items() if d is not None}
    return paired_difference({s: [0.0] for s in kept}, {s: [d] for s, d in kept.items()}).to_dict()


def summarize(done: Mapping[str, Any], start: Mapping[str, Mapping[str, Sequence[float]]]) -> dict[str, Any]:
    """Per arm, checkpoint and state set: pooled and over-seeds differences; grpo - null by state."""
    from mleforge.eval.paired import paired_difference

    seeds = sorted(done, key=lambda k: int(k.removeprefix("seed")))
    out: dict[str, Any] = {"seeds": seeds, "arms": {}, "grpo_minus_null": {}, "grpo_minus_null_over_seeds": {}}
    if not seeds:
        return out
    steps = list(done[seeds[0]]["arms"]["grpo"]["checkpoints"])
    for arm in ARMS:
        out["arms"][arm] = {}
        for step in steps:
            points = [done[s]["arms"][arm]["checkpoints"][step] for s in seeds]
            out["arms"][arm][step] = {name: {
                "pooled": pooled(start[name], [p[name]["per_state"] for p in points]),
                "over_seeds": over_seeds({s: p[name]["vs_start"]["diff"] for s, p in zip(seeds, points)}),
                "mean_reward": [p[name]["mean_reward"] for p in points]} for name in start}
    last = steps[-1]
    for name in start:
        grpo = [done[s]["arms"]["grpo"]["checkpoints"][last][name]["per_state"] for s in seeds]
        null = [done[s]["arms"]["null"]["checkpoints"][last][name]["per_state"] for s in seeds]
        units = sorted(set.intersection(*(set(x) for x in grpo + null)))
        out["grpo_minus_null"][name] = paired_difference(
            {u: [v for x in null for v in x[u]] for u in units}, {u: [v for x in grpo for v in x[u]] for u in units},
            metric="mean_reward").to_dict()
        # each seed's grpo run against its null run (the same seed), the seed as the unit
        arms = {arm: {s: done[s]["arms"][arm]["checkpoints"][last][name]["vs_start"]["diff"] for s in seeds}
                for arm in ARMS}
        out["grpo_minus_null_over_seeds"][name] = over_seeds(
            {s: None if arms["grpo"][s] is None or arms["null"][s] is None else arms["grpo"][s] - arms["null"][s]
             for s in seeds})
    return out


def table(summary: Mapping[str, Any]) -> dict[str, Any]:
    columns = ["arm", "step", "eval: after - start, pooled [95% CI]", "eval: over seeds [95% CI]",
               "probe: after - start, pooled [95% CI]"]
    rows = []
    for arm, points in summary["arms"].items():
        for step, p in points.items():
            rows.append([arm, step, shared_runs.ci_text(p["eval"]["pooled"]), shared_runs.ci_text(p["eval"]["over_seeds"]),
                         shared_runs.ci_text(p["probe"]["pooled"])])
    over = summary.get("grpo_minus_null_over_seeds", {})
    for name, d in summary["grpo_minus_null"].items():
        rows.append(["grpo - null", "last", shared_runs.ci_text(d) if name == "eval" else "",
                     shared_runs.ci_text(over[name]) if name == "eval" and name in over else "",
                     shared_runs.ci_text(d) if name == "probe" else ""])
    return {"title": f"warm start + GRPO against the warm start, {len(summary['seeds'])} seeds; paired by state "
                     "(mean [95% CI] (n, +up/-down)); null: rewards shuffled within groups",
            "columns": columns, "rows": rows}


def plot(summary: Mapping[str, Any], path: Path) -> str | None:
    """after - start on the evaluation tasks by step, per arm, with 95% CIs, as a PNG; None where
    matplotlib is not installed."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        return None
    figure = Figure(figsize=(6, 3.5), layout="constrained")
    ax = figure.add_subplot()
    for offset, (arm, points) in zip((-0.15, 0.15), summary["arms"].items()):
        xs, ys, lows, highs = [0.0], [0.0], [0.0], [0.0]
        for step, p in points.items():
            d = p["eval"]["pooled"]
            if d["diff"] is not None:
                low = d["diff"] if d["ci_low"] is None else d["ci_low"]  # no interval from one state
                high = d["diff"] if d["ci_high"] is None else d["ci_high"]
                xs.append(int(step) + offset)
                ys.append(d["diff"])
                lows.append(d["diff"] - low)
                highs.append(high - d["diff"])
        ax.errorbar(xs, ys, yerr=[lows, highs], marker="o", capsize=3, label=arm)
    ax.axhline(0.0, color="#57606a", linewidth=0.8)
    ax.set_xlabel("GRPO step")
    ax.set_ylabel("eval reward: after - warm start")
    ax.legend()
    figure.savefig(path, dpi=120)
    return str(path)


# --- the benchmark -----------------------------------------------------------------------------------


def partial_rows(data: Mapping[str, Any]) -> list[list[Any]]:
    """A row per run evaluated whose seed's other run is still to come: its arm, step, and
    after - start on the evaluation tasks and on the probe."""
    return [[f"{arm}, {key} alone (its pair to come)", step, shared_runs.ci_text(point["eval"]["vs_start"]), "",
             shared_runs.ci_text(point["probe"]["vs_start"])]
            for key, arms in sorted(data.get(PARTIAL, {}).items()) for arm, entry in arms.items()
            for step, point in entry["checkpoints"].items()]


def results_table(data: Mapping[str, Any]) -> dict[str, Any]:
    """The table of the seeds finished so far (none before the warm start is evaluated), then a
    row for each run evaluated whose seed's other run is still to come."""
    start = {name: data["start"][name]["per_state"] for name in ("eval", "probe")} if "start" in data else {}
    shown = table(summarize(data["done"] if start else {}, start))
    if start:
        shown["rows"] += partial_rows(data)
    if start and not data["done"] and any(data.get(PARTIAL, {}).values()):
        shown["title"] = shown["title"].replace(", 0 seeds;", ", no seed finished yet: its runs alone;")
    return shown


def run_learning(args: argparse.Namespace, *, registry: Any = None, progress: bool = True,
                 argv: list[str] | None = None) -> dict[str, Any]:
    """The benchmark; `argv`: the command line its JSON's meta names (None: this process's)."""
    results = shared_runs.run_arms(args, ARMS, benchmark="learning", table_of=results_table, registry=registry,
                                   progress=progress, argv=argv)
    summary = summarize(results.done, {name: results.data["start"][name]["per_state"] for name in ("eval", "probe")})
    picture = plot(summary, args.out.with_suffix(".png"))
    results.write(summary=summary, plot=picture)
    return results.data


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    shared_runs.add_shared_flags(p)
    shared_runs.add_arm_flags(p, "a grpo and a null run")
    return p


def plot_note(data: Mapping[str, Any]) -> list[str]:
    return [f"plot: {data['plot'] or 'not drawn (matplotlib is not installed)'}"]


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = build_parser().parse_args(argv)
    return shared_runs.run_main(run_learning, args, invocation(__file__, argv), plot_note)


if __name__ == "__main__":
    main()
