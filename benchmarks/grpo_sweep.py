"""GRPO's settings, measured: from one shared warm start, each setting changed alone, scored on
held-apart states of the TRAINING tasks (a validation set), paired against the warm start.

    python benchmarks/grpo_sweep.py --tiny --tasks titanic --eval-tasks diabetes --groups 4 --group-size 2 \\
        --expert-steps 3 --sft-steps 1 --val-states 2 --val-seeds 1 --configs base,groups/step=4 \\
        --work bench-out/sweep-tiny --out bench-out/sweep-tiny.json            # plumbing, minutes
    python benchmarks/grpo_sweep.py --groups 16 --val-states 16 --val-seeds 4 \\
        --work bench-out/sweep --out bench-out/sweep.json                      # the bundled Qwen, hours

One at a time around a base, not a grid: the base is the cpu preset (lr 5e-5, 1 group per
optimizer step, no warm-up, scale_rewards group, beta 0, invalid_groups standardize) and each
configuration changes one setting (CONFIGS), plus a null control, "base@seed+1" (the base's
settings at the next training seed): 12 runs (11 at one group per step, where scale_rewards
batch is the base's own computation and is recorded as such, `same_as_base`), where the full
grid of these levels is 432, beyond what a 2-core machine does in days. It measures each
setting's effect at the base, not their interactions; a second sweep around the chosen values
checks them together.

Every configuration spends the same rollouts: `--groups` groups of `--group-size` (steps =
groups / groups per step, so "groups/step=4" takes a quarter of the base's optimizer steps, each
on four groups' gradient). Same warm start, same seed journals, same training seed.

"max_new_tokens=256" changes the completions' cap where the warm start's completions reach the
base's: its validation evaluation samples with its own cap too (the setting is the policy's, in
training and use alike), every other configuration's, and the warm start's, with the base's.

Scored on a validation set: `--val-states` states of the training tasks, drawn from template-
expert episodes of their own seeds (never the evaluation tasks; none of them a state the buffer
is seeded with), each evaluated at `--val-seeds` sampling seeds. Per configuration: its final
model's reward there, paired by state against the warm start (after - start, mean, SE, 95% CI;
mleforge.eval.paired) and against the base configuration's final model (config - base), over
all states and over those with headroom; a change's verdict is "better" or "worse" only where
that CI of config - base lies beyond the null control's own difference (0 until the null is
finished, and the verdict says so: "better than 0 (base@seed+1 to come)"), else "unresolved"
(keep the base's value). The intervals are over states and hold
one training run on each side, so they carry no training-seed variance: two runs of the very
same settings differ too, and the null's config - base is that difference, once. A change must
beat it, not just 0 (learning.py measures training-seed variance properly, over seeds).

Resumable: each configuration's entry is appended to --out when it finishes and skipped when
present; a run cut short is continued by the trainer's own resume; evaluations are kept per
sampling seed in <work>/evals/, and each finished one in --out (`evaluations`: state, reward
and headroom per seed), which is what the comparisons read. So a later call (another session)
may have a fresh --work, as for benchmarks/learning.py: it makes the shared start again and
goes on only where it is the same bit for bit (`shared_start`). A record from before the
evaluations were kept in --out continues in its own --work only. `--configs` runs a subset (a
later call does the rest).
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as the CLI does, before torch loads

import argparse
import gc
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _learning_runs as shared_runs  # noqa: E402
from _record import invocation  # noqa: E402

NULL = "base@seed+1"
# (name, TrainConfig changes from the base): one setting at a time.
CONFIGS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("base", {}),
    ("lr=5e-6", {"lr": 5e-6}),
    ("lr=1e-5", {"lr": 1e-5}),
    ("groups/step=4", {"groups_per_step": 4}),
    ("warmup=0.25", {"warmup": 0.25, "lr_scheduler": "constant_with_warmup"}),
    ("scale=batch", {"scale_rewards": "batch"}),
    ("scale=none", {"scale_rewards": "none"}),
    ("beta=0.04", {"beta": 0.04}),
    ("invalid=zero", {"invalid_groups": "zero"}),
    ("invalid=raw", {"invalid_groups": "raw"}),
    ("max_new_tokens=256", {"max_new_tokens": 256}),  # the completions' cap, in training and evaluation
    (NULL, {}),  # the null control: the base's settings at the next training seed
)
SEED_OFFSET = {NULL: 1}  # a configuration's training seed: --train-seed plus this
START = "start"  # the warm start's validation evaluation
EVALUATIONS = "evaluations"  # {configuration or START: its validation evaluation, compact}


def selected(names: str | None) -> list[tuple[str, dict[str, Any]]]:
    """The configurations named (comma-separated; None: all), in CONFIGS' order."""
    known = dict(CONFIGS)
    if names is None:
        return list(CONFIGS)
    wanted = [n.strip() for n in names.split(",") if n.strip()]
    unknown = [n for n in wanted if n not in known]
    if unknown:
        raise SystemExit(f"error: --configs: unknown {', '.join(unknown)}; known: {', '.join(known)}")
    return [(n, c) for n, c in CONFIGS if n in wanted]


def same_as_base(changes: Mapping[str, Any], base: Any) -> str | None:
    """Why a configuration computes exactly what the base does (None where it does not): then it
    is recorded as such and not trained. scale_rewards "batch" divides by the std of the step's
    rewards, "group" by each group's; with one group per optimizer step the two are one number
    (TRL's advantages are the same), so the run would repeat the base run."""
    if changes.get("scale_rewards") == "batch" and int(changes.get("groups_per_step", base.groups_per_step)) == 1 \
            and base.scale_rewards == "group":
        return "scale_rewards batch at 1 group per optimizer step is the group's std: the base's advantages"
    return None


def steps_for(groups: int, changes: Mapping[str, Any]) -> int:
    """Optimizer steps of a configuration that spends `groups` groups."""
    per_step = int(changes.get("groups_per_step", 1))
    if groups % per_step:
        raise SystemExit(f"error: --groups {groups} is not a multiple of {per_step} groups per step: the "
                         "configurations would not spend the same rollouts")
    return groups // per_step


def entry_of(name: str, changes: Mapping[str, Any], steps: int, start: Mapping[str, Any], after: Mapping[str, Any],
             base_after: Mapping[str, Any] | None, figures: Mapping[str, Any], wall: float) -> dict[str, Any]:
    """One configuration's record: its changes, its paired differences, its training figures."""
    vs_base = None if base_after is None else {
        "all": shared_runs.compare(base_after, after), "headroom": shared_runs.compare(base_after, after,
                                                                                      headroom_only=True)}
    return {"config": name, "changes": dict(changes), "steps": steps,
            "groups_per_step": int(changes.get("groups_per_step", 1)),
            "val_mean_reward": shared_runs.mean_reward(after),
            "vs_start": {"all": shared_runs.compare(start, after),
                         "headroom": shared_runs.compare(start, after, headroom_only=True)},
            "vs_base": vs_base, "train": dict(figures), "wall_s": round(wall, 1)}


def fmt(value: float | None) -> str:
    return "–" if value is None else f"{value:.3f}"


def verdict(vs_base: Mapping[str, Any] | None, null: Mapping[str, Any] | None = None) -> str:
    """What the validation set says of a change against the base: better or worse where the
    paired 95% CI of config - base lies above or below the margin, else unresolved (keep the
    base). The margin is the size of the null control's config - base (the base's settings at
    another training seed: what a change of training seed alone moves), 0 without one."""
    if vs_base is None or vs_base.get("ci_low") is None:
        return "unresolved"
    margin = 0.0 if null is None or null.get("diff") is None else abs(null["diff"])
    if vs_base["ci_low"] > margin:
        return "better"
    return "worse" if vs_base["ci_high"] < -margin else "unresolved"


def table(results: Mapping[str, Any]) -> dict[str, Any]:
    """The table of the configurations finished (the results page's, benchmarks/_record.py)."""
    columns = ["config", "steps x groups", "val reward", "after - start [95% CI]", "config - base [95% CI]",
               "verdict", "train reward/rollout", "groups no valid"]
    rows = []
    null = results.get(NULL)
    null_vs_base = None if null is None or null["vs_base"] is None else null["vs_base"]["all"]
    for name, _ in CONFIGS:
        e = results.get(name)
        if e is None:
            continue
        if e.get("same_as_base"):
            rows.append([name, "–", "–", "–", "–", f"not run: {e['same_as_base']}", "–", "–"])
            continue
        if name == "base":
            judged = "base"
        elif name == NULL:
            judged = "null control"
        else:
            judged = verdict(e["vs_base"] and e["vs_base"]["all"], null_vs_base)
            if null_vs_base is None and judged != "unresolved":  # a record still running: no margin yet
                judged += f" than 0 ({NULL} to come)"
        rows.append([name, f"{e['steps']} x {e['groups_per_step']}", fmt(e["val_mean_reward"]),
                     shared_runs.ci_text(e["vs_start"]["all"]),
                     "–" if e["vs_base"] is None else shared_runs.ci_text(e["vs_base"]["all"]),
                     judged,
                     fmt(e["train"].get("reward_per_rollout")), fmt(e["train"].get("frac_groups_no_valid"))])
    return {"title": "GRPO settings one at a time around the cpu preset, on held-apart states of the training tasks "
                     "(paired by state; mean [95% CI] (n states, +up/-down)); a verdict needs the CI beyond the null "
                     f"control's difference ({NULL}: the base at another training seed)", "columns": columns,
            "rows": rows}


def run_sweep(args: argparse.Namespace, *, registry: Any = None, progress: bool = True,
              argv: list[str] | None = None) -> dict[str, Any]:
    """The sweep; `argv`: the command line its JSON's meta names (None: this process's)."""
    from mleforge.cli.output import err_console
    from mleforge.tasks.registry import TaskRegistry
    from mleforge.train.config import TrainConfig

    registry = registry or TaskRegistry()
    configs = selected(args.configs)
    steps = {name: steps_for(args.groups, changes) for name, changes in configs}
    work = Path(args.work).expanduser().resolve()
    work.mkdir(parents=True, exist_ok=True)
    base = shared_runs.as_recorded(shared_runs.base_config(args, work), Path(args.out), work, progress=progress)
    for name, changes in configs:  # every configuration's settings checked before hours of runs
        TrainConfig.from_dict({**base.to_dict(), **changes, "steps": steps[name]})
    results = shared_runs.Results(args.out, "grpo_sweep", {
        "base": base.to_dict(), "groups": args.groups, "val_states": args.val_states, "val_seeds": args.val_seeds,
        "train_seed": args.train_seed, "journals": args.journals}, lambda data: table(data["done"]), argv, work=work,
        defaults=shared_runs.setting_defaults())
    if "work" in results.data and EVALUATIONS not in results.data:
        # A record from before the evaluations were kept in it: they are under its --work only.
        results.fix("work", str(work), " folder (the evaluations each configuration is compared with are there)")
    started = time.perf_counter()
    shared = shared_runs.shared_start(base, args, work, registry, progress)
    try:
        if not results.done:  # nothing measured depends on the shared start yet: this call's counts
            for key in ("shared_start", EVALUATIONS):
                results.data.pop(key, None)
        results.fix("shared_start", shared_runs.fingerprint(shared),
                    " (a warm start or buffer seed states made otherwise: another machine, library or commit)")
        states, dropped = shared_runs.held_apart_states(shared, work, args.val_states, args.eval_seed, progress)
        seeds = list(range(args.val_seeds))
        results.fix("validation_states", [s.state_id for s in states])
        start = evaluation_of(results, work, START, states, seeds) or shared_runs.evaluate(
            shared, shared.start_spec, states, seeds, work / "evals" / f"{START}.json")
        keep(results, START, start)
        results.write(validation={"states": [s.state_id for s in states], "dropped_as_buffer_seeds": dropped,
                                  "seeds": seeds, "start_mean_reward": shared_runs.mean_reward(start)})
        for name, changes in configs:
            why = same_as_base(changes, base)
            if why and name not in results.done:
                if progress:
                    err_console.print(f"{name}: not run ({why})", highlight=False)
                results.record(name, {"config": name, "changes": dict(changes), "same_as_base": why})
        todo = results.pending(name for name, _ in configs)
        for i, name in enumerate(todo):
            if progress:
                err_console.print(f"[bold][{i + 1}/{len(todo)}] {name}[/]  ({steps[name]} steps; elapsed "
                                  f"{time.perf_counter() - started:.0f} s)", highlight=False)
            changes = dict(CONFIGS)[name]
            run_started = time.perf_counter()
            folder = work / "runs" / name.replace("/", "-per-")
            config = base.replace(seed=args.train_seed + SEED_OFFSET.get(name, 0), warm_start=shared.sft, journals=shared.journals,
                                  stepwise={"enabled": False}, steps=steps[name], **changes)
            result = shared_runs.train_one(config, folder, registry, progress)
            gc.collect()
            after = shared_runs.evaluate(shared, f"hf:{result.final_model}", states, seeds,
                                         work / "evals" / f"{folder.name}.json", changes.get("max_new_tokens"))
            keep(results, name, after)
            base_after = after if name == "base" else evaluation_of(results, work, "base", states, seeds)
            results.record(name, entry_of(name, changes, steps[name], start, after, base_after,
                                          shared_runs.train_figures(folder), time.perf_counter() - run_started))
            gc.collect()
        fill_vs_base(results, work, states, seeds)
    finally:
        shared.executor.close()
    results.write()
    return results.data


def fill_vs_base(results: Any, work: Path, states: list[Any], seeds: list[int]) -> None:
    """config - base for the entries finished before the base was (a --configs subset)."""
    base_after = evaluation_of(results, work, "base", states, seeds)
    for name, entry in results.done.items():
        if entry.get("same_as_base"):
            continue
        after = evaluation_of(results, work, name)
        if entry.get("vs_base") is None and base_after is not None and after is not None:
            entry["vs_base"] = {"all": shared_runs.compare(base_after, after),
                                "headroom": shared_runs.compare(base_after, after, headroom_only=True)}
            results.record(name, entry)


def keep(results: Any, name: str, evaluation: Mapping[str, Any]) -> None:
    """A configuration's (or the warm start's) validation evaluation, kept in --out (state,
    reward, headroom per sampling seed): the comparisons of a later call read it there, so that
    a later session continues the sweep from --out alone."""
    results.data.setdefault(EVALUATIONS, {})[name] = shared_runs.compact(evaluation)


def evaluation_of(results: Any, work: Path, name: str, states: list[Any] | None = None,
                  seeds: list[int] | None = None) -> dict[str, Any] | None:
    """A configuration's validation evaluation: kept in --out, else (a record from before they
    were kept) its file under --work; None where it is not finished (every seed of `seeds` on
    `states`, where given)."""
    import json

    data = results.data.get(EVALUATIONS, {}).get(name)
    path = work / "evals" / f"{name.replace('/', '-per-')}.json"
    if data is None and path.is_file():
        data = json.loads(path.read_text(encoding="utf-8"))
    if data is None or states is not None and data.get("states") != [s.state_id for s in states]:
        return None
    return data if seeds is None or all(str(s) in data["seeds"] for s in seeds) else None


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    shared_runs.add_shared_flags(p)
    p.add_argument("--groups", type=int, default=16, help="groups every configuration trains on (its rollouts: "
                                                          "groups x group size); a multiple of 4")
    p.add_argument("--val-states", type=int, default=16, help="held-apart states of the training tasks")
    p.add_argument("--val-seeds", type=int, default=4, help="sampling seeds per validation state")
    p.add_argument("--train-seed", type=int, default=0, help=f"every configuration's training seed ({NULL}'s: "
                                                             "this plus 1)")
    p.add_argument("--configs", help=f"a subset to run now (comma-separated; default all): "
                                     f"{', '.join(n for n, _ in CONFIGS)}")
    return p


def validation_note(data: Mapping[str, Any]) -> list[str]:
    v = data["validation"]
    return [f"validation: {len(v['states'])} states x {len(v['seeds'])} seeds (warm start's mean reward "
            f"{v['start_mean_reward']}); {v['dropped_as_buffer_seeds']} candidates dropped as buffer seeds"]


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = build_parser().parse_args(argv)
    return shared_runs.run_main(run_sweep, args, invocation(__file__, argv), validation_note)


if __name__ == "__main__":
    main()
