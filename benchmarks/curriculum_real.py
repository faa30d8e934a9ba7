"""Uniform against Learnability-Potential sampling on a REAL model, seed by seed, paired.

    python benchmarks/curriculum_real.py --tiny --tasks titanic --eval-tasks diabetes --steps 1 --evals 1 \\
        --seeds 2 --group-size 2 --expert-steps 3 --sft-steps 1 --stepwise-states 2 --probe-states 2 \\
        --eval-seeds 1 --work bench-out/currreal-tiny --out bench-out/currreal-tiny.json   # plumbing, minutes
    python benchmarks/curriculum_real.py --steps 32 --evals 1 --seeds 3 --eval-seeds 4 --stepwise-states 16 \\
        --probe-states 8 --work bench-out/learning --out benchmarks/results/curriculum_real.json \\
        --reuse benchmarks/results/learning.json                       # the bundled Qwen, hours

For each training seed, two `mleforge train` runs (the cpu preset, the flags given here on top)
from one shared warm start, with the same budget (`--steps` steps of the preset's groups per
step x `--group-size` rollouts), the same seed and seed journals; they differ only in the
sampler that draws each step's states from the buffer:

    uniform        every state of the buffer alike
    learnability   Learnability Potential (mleforge.curriculum.learnability: states whose
                   rollouts disagree, neither always solved nor always failed)

It is benchmarks/learning.py's machinery (benchmarks/_learning_runs.py: the shared start made
once and checked bit for bit by a later call, the warm start's evaluation kept in --out, each
run kept once evaluated, a seed's entry when both runs are) with these two arms. Each run is
evaluated at its checkpoints on the evaluation tasks' states with headroom (`--eval-tasks`,
never trained on) and on a probe set of held-apart training states, at `--eval-seeds` sampling
seeds each, paired by state against the warm start.

`--reuse FILE` (repeatable): a results file of learning.py or of this benchmark made with the
same settings and the same shared start (its `settings`, `shared_start`, `state_ids` and
warm-start evaluation equal this one's; refused otherwise, with what differs). An arm here
takes the runs of the first file's arm whose TrainConfig is its own: the cpu preset samples by
learnability, so learning.py's `grpo` run of a seed is this benchmark's `learnability` run of
it, config for config. Such a run is taken instead of trained again, marked `reused`, and so
is the warm start's evaluation. A file that does not pair, or has no arm of an arm's config
here, is refused before anything is trained; a seed it does not hold yet is trained here. With
the same --work the shared start is not made again either, and a reused run's training figures
are read again from its folder (figures added since it was recorded, once they agree on the
rest).

`--success valid`: the learnability arm counts any valid run a success (learnability.success;
L is then the chance that a group mixes valid and failed runs); its runs go to
`learnability-valid-seed<k>` folders. The uniform arm is unchanged, so a record of the default
kind lends it its uniform runs (`--reuse curriculum_real.json`) and only the learnability runs
are trained. Its "partly successful" figure counts each run's own successes.

Figures, per run, then mean +/- SEM over seeds per sampler (mleforge.eval.aggregate.mean_sem),
and learnability - uniform paired by seed (the seeds as units: mean, SE and a t-interval with
seeds - 1 degrees of freedom; mleforge.eval.paired):

    frac_zero_std_groups   groups whose scored rewards all tie: zero advantage
    frac_groups_no_valid   groups with no valid rollout: the reward orders failures (format
                           error < execution error < ...), so such a group is rarely tied, yet
                           its advantages rank failures only
    frac_groups_no_signal  groups tied or with no valid rollout: nothing learned of the metric
    reward_per_rollout     the mean reward of the run's scored rollouts
    train_valid_rate       rollouts whose script wrote a valid submission
    frac_groups_mixed_success  groups some but not all of whose rollouts succeed (the curriculum's
                           own success: a valid submission, and for an improve state one that
                           beats it): what the Learnability Potential's L predicts and steers to
    frac_groups_redrawn    groups on a state an earlier group of the run drew: a sampler can
                           prefer a state only by what its earlier groups showed
    eval / probe           after - warm start, mean reward, at the last checkpoint

and, by state, learnability - uniform on the evaluation tasks and on the probe, each state's
values pooled over the seeds' runs (an interval for these training seeds: the evaluation's
noise only; the difference paired by seed is the test). JSON to --out (benchmarks/_record.py's convention at every
write) and the table. The simulated comparison is benchmarks/curriculum.py.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as the CLI does, before torch loads

import argparse
import copy
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _learning_runs as shared_runs  # noqa: E402
from _record import invocation  # noqa: E402
from mleforge.curriculum.config import SUCCESS_KINDS  # noqa: E402

SAMPLERS = ("uniform", "learnability")
ARMS = {sampler: {"sampler": {"kind": sampler}} for sampler in SAMPLERS}  # arm -> its TrainConfig changes

# (key, what the table calls it): a run's training figures, then its evaluation at the last checkpoint.
TRAIN_FIGURES = (
    ("frac_zero_std_groups", "tied groups (frac)"),
    ("frac_groups_no_valid", "groups with no valid rollout (frac)"),
    ("frac_groups_no_signal", "groups tied or with no valid rollout (frac)"),
    ("reward_per_rollout", "reward / rollout"),
    ("train_valid_rate", "valid rate (training)"),
    ("frac_groups_mixed_success", "groups partly successful (frac)"),
    ("frac_groups_mixed_valid", "groups with valid and failed rollouts (frac)"),
    ("frac_groups_debug", "groups on debug states (frac)"),
    ("frac_groups_redrawn", "groups on a state drawn before (frac)"),
)
EVAL_FIGURES = (
    ("eval_vs_start", "eval tasks: after - start"),
    ("eval_mean_reward", "eval tasks: mean reward after"),
    ("probe_vs_start", "probe: after - start"),
)
FIGURES = TRAIN_FIGURES + EVAL_FIGURES


def arms_for(success: str) -> tuple[dict[str, Any], dict[str, str]]:
    """(the arms, their run folders where not the arm's name) for learnability.success `success`
    on the learnability arm; the uniform arm is the same whatever it is, so that its runs are
    one config (and a record of the other kind may lend them, --reuse)."""
    arms = copy.deepcopy(ARMS)
    if success == "improve":
        return arms, {}
    arms["learnability"]["learnability"] = {"success": success}
    return arms, {"learnability": f"learnability-{success}"}


# --- the math: pure functions ----------------------------------------------------------------------


def last_point(entry: Mapping[str, Any]) -> dict[str, Any]:
    """A run's evaluation at its last checkpoint."""
    return entry["checkpoints"][max(entry["checkpoints"], key=int)]


def run_values(entry: Mapping[str, Any]) -> dict[str, float | None]:
    """A run's figures (FIGURES' keys): its training figures, and its last checkpoint's evaluation."""
    last = last_point(entry)
    out = {key: entry["train"].get(key) for key, _ in TRAIN_FIGURES}
    out.update(eval_vs_start=last["eval"]["vs_start"]["diff"], eval_mean_reward=last["eval"]["mean_reward"],
               probe_vs_start=last["probe"]["vs_start"]["diff"])
    return out


def over_seeds(values: Mapping[int, float | None]) -> dict[str, Any]:
    """One sampler's figure over seeds: {"mean", "sem", "n", "per_seed"}; a seed whose run has
    no value is left out of the mean, and kept in per_seed as None."""
    from mleforge.eval.aggregate import mean_sem

    kept = [values[s] for s in sorted(values) if values[s] is not None]
    return {**mean_sem(kept), "per_seed": {str(s): values[s] for s in sorted(values)}}


def paired_by_seed(uniform: Mapping[int, float | None], learnability: Mapping[int, float | None]) -> dict[str, Any]:
    """learnability - uniform seed by seed, over the seeds both have a value for: the mean
    difference, its SE over seeds and a t-interval (mleforge.eval.paired), and each seed's."""
    from mleforge.eval.paired import paired_difference

    seeds = sorted(s for s in set(uniform) & set(learnability)
                   if uniform[s] is not None and learnability[s] is not None)
    d = paired_difference({str(s): [uniform[s]] for s in seeds}, {str(s): [learnability[s]] for s in seeds}).to_dict()
    return {**d, "per_seed": {str(s): learnability[s] - uniform[s] for s in seeds}}


def by_state(done: Mapping[str, Any], name: str) -> dict[str, Any]:
    """learnability - uniform on a state set at the last checkpoint, paired by state, each
    state's values pooled over the seeds' runs. Its interval holds the evaluation's noise for
    these training seeds, not the training's own: the difference paired by seed is the test
    of the samplers, this one says on how many states it shows."""
    from mleforge.eval.paired import paired_difference

    pooled: dict[str, dict[str, list[float]]] = {}
    for sampler in SAMPLERS:
        points = [last_point(e["arms"][sampler])[name]["per_state"] for e in done.values()]
        units = set.intersection(*(set(p) for p in points)) if points else set()
        pooled[sampler] = {u: [v for p in points for v in p[u]] for u in units}
    units = sorted(set(pooled["uniform"]) & set(pooled["learnability"]))
    return paired_difference({u: pooled["uniform"][u] for u in units}, {u: pooled["learnability"][u] for u in units},
                             metric="mean_reward").to_dict()


def summarize(done: Mapping[str, Any]) -> dict[str, Any]:
    """Per sampler, each figure over seeds; learnability - uniform paired by seed; and by state.
    Each figure is taken over the seeds where both samplers' runs have it (a run recorded before
    a figure existed has none), so that the two columns and their difference are of one set of
    seeds."""
    seeds = sorted(done, key=lambda k: int(k.removeprefix("seed")))
    values = {sampler: {int(k.removeprefix("seed")): run_values(done[k]["arms"][sampler]) for k in seeds}
              for sampler in SAMPLERS}
    figure = {sampler: {key: {s: v[key] for s, v in values[sampler].items()} for key, _ in FIGURES}
              for sampler in SAMPLERS}
    for key, _ in FIGURES:
        paired = {s for s in figure["uniform"][key]
                  if figure["uniform"][key][s] is not None and figure["learnability"][key][s] is not None}
        for sampler in SAMPLERS:
            figure[sampler][key] = {s: v for s, v in figure[sampler][key].items() if s in paired}
    return {"seeds": seeds,
            "samplers": {sampler: {key: over_seeds(figure[sampler][key]) for key, _ in FIGURES} for sampler in SAMPLERS},
            "difference": {key: paired_by_seed(figure["uniform"][key], figure["learnability"][key])
                           for key, _ in FIGURES},
            "by_state": {name: by_state(done, name) for name in ("eval", "probe")}}


def pm(figure: Mapping[str, Any]) -> str:
    if figure.get("mean") is None:
        return "–"
    return f"{figure['mean']:.3f}" + ("" if figure.get("sem") is None else f" ± {figure['sem']:.3f}") + \
        f" (n={figure['n']})"


def table(summary: Mapping[str, Any], success: str = "improve") -> dict[str, Any]:
    """The table; `success`: the learnability arm's learnability.success (the uniform arm's is
    "improve"), named in the title; with another, "partly successful" counts each run's own."""
    names = dict(FIGURES)
    if success != "improve":
        names["frac_groups_mixed_success"] = "groups partly successful, each run's own success (frac)"
    rows = [[names[key], pm(summary["samplers"]["uniform"][key]), pm(summary["samplers"]["learnability"][key]),
             shared_runs.ci_text(summary["difference"][key], se=True, counts=False)] for key, _ in FIGURES]
    rows += [[f"{label}, by state (seeds pooled)", "", "", shared_runs.ci_text(summary["by_state"][name])]
             for name, label in (("eval", "eval tasks"), ("probe", "probe"))]
    kind = "" if success == "improve" else f" (its success: {success})"
    return {"title": f"uniform vs learnability sampling{kind}, {len(summary['seeds'])} seeds: mean ± SEM over seeds; "
                     "the difference paired by seed (mean ± SE [95% CI]), and by state (mean [95% CI] (n, +up/-down))",
            "columns": ["figure", "uniform", "learnability", "learnability - uniform"], "rows": rows}


def success_of(data: Mapping[str, Any]) -> str:
    """The learnability arm's learnability.success in a results file (its arms' changes)."""
    return data.get("arms", ARMS).get("learnability", {}).get("learnability", {}).get("success", "improve")


def results_table(data: Mapping[str, Any]) -> dict[str, Any]:
    """The table of the seeds finished so far, then a row per run evaluated whose seed's other
    run is still to come (its after - start on the evaluation tasks and the probe)."""
    shown = table(summarize(data["done"]), success_of(data))
    for key, arms in sorted(data.get(shared_runs.PARTIAL, {}).items()):
        for arm, entry in arms.items():
            v = run_values(entry)
            text = " / ".join("–" if v[k] is None else f"{v[k]:+.3f}" for k in ("eval_vs_start", "probe_vs_start"))
            shown["rows"].append([f"{arm}, {key} alone (its pair to come): eval / probe after - start",
                                  text if arm == "uniform" else "", text if arm == "learnability" else "", ""])
    return shown


# --- reusing runs measured by another results file ------------------------------------------------


class Reuse:
    """`run_arms`' reuse: runs another results file measured (learning.py's, or this benchmark's
    own) whose TrainConfig is the very one an arm here runs. Each file must be made with the
    same settings and shared start and drawn the same states (`check_reusable`); an arm here
    takes its runs from the first file that has an arm of its config (the base with that arm's
    changes, TrainConfig for TrainConfig: with the cpu preset, which samples by learnability,
    learning.py's `grpo` run is this benchmark's `learnability` run, and a file of this
    benchmark lends its `uniform` runs to a record that changes the learnability arm only). A
    file is read at each use: it may gain seeds while this benchmark runs."""

    def __init__(self, paths: Sequence[Path] | Path, progress: bool = True):
        self.paths = [Path(p) for p in ([paths] if isinstance(paths, (str, Path)) else paths)]
        self.progress = progress
        self.sources: dict[str, tuple[Path, str]] = {}  # arm here -> (file, its arm)

    def saved(self, path: Path) -> dict[str, Any]:
        if not path.is_file():
            raise ValueError(f"--reuse {path}: no such file (a learning.py or curriculum_real.py results file)")
        return json.loads(path.read_text(encoding="utf-8"))

    def check(self, results: Any, early: bool = False) -> None:
        """Before any run: each file is refused unless it pairs with this benchmark and has an
        arm of some arm's config here. `early` (before the shared start is made): the settings
        and the arms; then (the states drawn) the shared start, the states and the warm-start
        evaluation too: where this --out has none yet, the first file's is taken, so that every
        run pairs with one evaluation of the warm start (and none is sampled again), and every
        file must hold that one."""
        keys = ("settings",) if early else ("settings", "shared_start", "state_ids")
        for path in self.paths:
            saved = self.saved(path)
            check_reusable(saved, results.data, path, keys=keys)
            found = same_config_arms(results.data, saved)
            if not found:
                raise ValueError(f"--reuse {path}: none of its arms ({', '.join(recorded_arms(saved)) or 'none'}) "
                                 f"runs the config of an arm here ({', '.join(results.data['arms'])})")
            for arm, theirs in found.items():
                self.sources.setdefault(arm, (path, theirs))
            if early:
                continue
            if shared_runs.START_RECORDS not in results.data and shared_runs.START_RECORDS in saved:
                results.data[shared_runs.START_RECORDS] = saved[shared_runs.START_RECORDS]
            for key in (shared_runs.START_RECORDS, "start"):
                if key in saved and key in results.data and saved[key] != results.data[key]:
                    raise ValueError(f"--reuse {path}: its runs pair with another evaluation of the warm start "
                                     f"({key}: {shared_runs.differences(saved[key], results.data[key])}); they do not "
                                     "pair with this benchmark's")

    def entry(self, results: Any, key: str, arm: str, work: Path) -> dict[str, Any] | None:
        if arm not in self.sources:
            return None
        path, theirs = self.sources[arm]
        saved = self.saved(path)
        check_reusable(saved, results.data, path)
        entry = saved.get("done", {}).get(key, {}).get("arms", {}).get(theirs) or \
            saved.get(shared_runs.PARTIAL, {}).get(key, {}).get(theirs)
        if self.progress:
            from mleforge.cli.output import err_console

            err_console.print(f"{arm} {key}: " + (f"{saved['benchmark']}'s {theirs} run, from {path}" if entry
                                                   else f"not in {path} yet: trained here"), highlight=False)
        if entry is None:
            return None
        entry = copy.deepcopy(entry)
        prior = entry.get("reused") or {}
        folder = run_folder(entry, theirs, saved.get("folders", {}))
        entry["train"] = reread_train(entry["train"], work / "runs" / f"{folder}-{key}")
        entry["reused"] = {"file": path.name, "benchmark": saved["benchmark"], "arm": theirs, "folder": folder,
                           **measured_by(entry, prior, saved)}
        return entry


def measured_by(entry: Mapping[str, Any], prior: Mapping[str, Any], saved: Mapping[str, Any]) -> dict[str, Any]:
    """What `reused` says of the commit that measured a lent run: nothing where the run names
    its own (`arm_entry`'s measured_by, kept in the copy). A run from before runs named theirs
    was measured by one of its file's calls, not known which: then measured_by None and the
    commits of all of them (`file_commits`); for a run its file had lent from another
    (`prior`, its `reused`), that other file's (`measured_in`), as far as it was known."""
    if entry.get("measured_by"):
        return {}
    if prior:  # its commit, if any, was the lending file's latest call's: not kept
        return {"measured_by": None, "file_commits": list(prior.get("file_commits", [])),
                "measured_in": prior.get("measured_in") or prior.get("file")}
    calls = [*saved.get("earlier_meta", []), saved.get("meta", {})]
    return {"measured_by": None, "file_commits": sorted({m["commit"] for m in calls if m.get("commit")})}


def recorded_arms(saved: Mapping[str, Any]) -> dict[str, Any]:
    """A results file's arms: as recorded, or for a file from before they were (learning.py's
    first seeds), its benchmark's own."""
    if "arms" in saved:
        return dict(saved["arms"])
    if saved.get("benchmark") == "learning":
        import learning

        return copy.deepcopy(learning.ARMS)
    return {}


def same_config_arms(data: Mapping[str, Any], saved: Mapping[str, Any]) -> dict[str, str]:
    """{arm here: an arm of `saved` with the same TrainConfig}: the base (this file's settings)
    with GRPO's settings given as flags and each arm's changes (`arm_config`, as the runs are
    made), compared whole."""
    from mleforge.train.config import TrainConfig

    base = TrainConfig.from_dict(copy.deepcopy(data["settings"]["base"]))
    flags = data["settings"].get("settings", {})
    theirs = {name: shared_runs.arm_config(base, flags, c).to_dict() for name, c in recorded_arms(saved).items()}
    found = {}
    for arm, changes in data["arms"].items():
        mine = shared_runs.arm_config(base, flags, changes).to_dict()
        match = next((name for name, config in theirs.items() if config == mine), None)
        if match is not None:
            found[arm] = match
    return found


def check_reusable(saved: Mapping[str, Any], data: Mapping[str, Any], path: Path,
                   keys: Sequence[str] = ("settings", "shared_start", "state_ids", "start")) -> None:
    """Refused unless `saved` (a results file of `run_arms`) holds runs that pair with this
    benchmark's: the same `keys` (settings, shared start, states, warm-start evaluation; a
    field one of the two files lacks counts where the other holds its default)."""
    if saved.get("benchmark") not in ("learning", "curriculum_real"):
        raise ValueError(f"--reuse {path}: holds benchmark {saved.get('benchmark')!r}, not learning.py's or "
                         "curriculum_real.py's")
    defaults = json.loads(json.dumps(shared_runs.setting_defaults(), default=str))
    for key in keys:
        a, b = saved.get(key), data.get(key)
        same = a == b or key == "settings" and (shared_runs.added_at_default(a, b, defaults)
                                                or shared_runs.added_at_default(b, a, defaults))
        if not same:
            raise ValueError(f"--reuse {path}: made with another {key} ({shared_runs.differences(a, b)}); its runs do "
                             "not pair with this benchmark's")


def reread_train(stored: Mapping[str, Any], folder: Path) -> dict[str, Any]:
    """A reused run's training figures read again from its folder where it is here and agrees
    with what was stored on every figure stored (so: the same run); else the stored ones."""
    if not (folder / "rollouts").is_dir():
        return dict(stored)
    now = shared_runs.train_figures(folder)
    return now if all(now.get(k) == v for k, v in stored.items()) else dict(stored)


def refresh_train(done: Mapping[str, Any], work: Path, folders: Mapping[str, str] | None = None) -> None:
    """Each finished run's training figures read again from its folder under `work` where it is
    there and agrees with every figure stored (`reread_train`): a run recorded before a figure
    existed gains it, and nothing stored changes. `folders`: an arm's run folder name, where
    not the arm's."""
    for key, entry in done.items():
        for arm, run in entry["arms"].items():
            run["train"] = reread_train(run["train"], work / "runs" / f"{run_folder(run, arm, folders or {})}-{key}")


def run_folder(run: Mapping[str, Any], arm: str, folders: Mapping[str, str]) -> str:
    """The stem of a run's folder under <work>/runs: a reused run's where it was trained, else
    the arm's folder in its file (`folders`), else the arm."""
    reused = run.get("reused") or {}
    return reused.get("folder") or reused.get("arm") or folders.get(arm, arm)


# --- the benchmark -----------------------------------------------------------------------------------


def run_benchmark(args: argparse.Namespace, *, registry: Any = None, progress: bool = True,
                  argv: Sequence[str] | None = None) -> dict[str, Any]:
    from mleforge.errors import ConfigError

    if args.seeds < 2:
        raise ConfigError(f"--seeds: got {args.seeds}; a difference paired by seed needs at least 2 (3 or more for "
                          "a figure worth reporting)")
    reuse = None if not args.reuse else Reuse(args.reuse, progress)
    arms, folders = arms_for(args.success)
    work = Path(args.work).expanduser().resolve()
    results = shared_runs.run_arms(args, arms, benchmark="curriculum_real", table_of=results_table, registry=registry,
                                   progress=progress, argv=argv, reuse=reuse, folders=folders,
                                   prepare=lambda r: refresh_train(r.done, work, folders))
    results.write(summary=summarize(results.done))
    return results.data


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    shared_runs.add_shared_flags(p)
    shared_runs.add_arm_flags(p, "a uniform and a learnability run")
    p.add_argument("--reuse", type=Path, action="append", help="a results file of learning.py or of this benchmark, "
                   "of the same settings: its runs of an arm's very config are taken, not trained again (learning.py's "
                   "grpo runs are the learnability runs); may be given more than once")
    p.add_argument("--success", choices=SUCCESS_KINDS, default="improve",
                   help="learnability.success of the learnability arm: what L counts as a success (valid: any valid "
                        "run, on every stage); the uniform arm is the same either way")
    return p


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = build_parser().parse_args(argv)
    return shared_runs.run_main(run_benchmark, args, invocation(__file__, argv), lambda data: [])


if __name__ == "__main__":
    main()
