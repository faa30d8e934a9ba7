"""What benchmarks/grpo_sweep.py, benchmarks/learning.py and benchmarks/curriculum_real.py share.

- The base config: the cpu preset with the flags given on top (`preset_config`), a tiny random
  model for plumbing runs (`--tiny`).
- The shared start, made once in --work and reused by every run and every later call:
  the template expert's collect on the training tasks (its journals seed every run's buffer,
  its samples are the SFT warm start's), the warm start itself, exactly as `mleforge train
  --sft auto` makes them.
- Held-apart states of the TRAINING tasks (the sweep's validation set, learning.py's probe set):
  drawn from template-expert episodes of their own seeds (VALIDATION_FIRST_SEED on), never from
  the episodes that seed the buffer; any state that is also a buffer seed is dropped.
- The evaluation tasks' states (learning.py): as the training run's step-wise evaluation draws them.
- A model evaluated on a set of states at several sampling seeds (one completion per state and
  seed), saved per seed and read back on a later call; two evaluations of one state set pair by
  state through mleforge.eval.paired (each state's mean over seeds, then a t-interval over states).
  The states are drawn with mleforge.eval.stepwise.draw_states and only those with headroom kept
  (headroom "require": a state whose reference score is already the metric's perfect value can
  show no improvement); the completions are mleforge.eval.stepwise.run_stepwise's, one call per
  sampling seed so that each seed is saved (and its completions repeat) on its own.
- Results appended to a JSON as each piece finishes (`Results`): a key present is never redone.
- Arms over training seeds (`run_arms`): for each seed, one `mleforge train` run per arm (the
  same warm start, seed journals, seed and budget; the arms differ only in their config
  changes), each evaluated at its checkpoints on the evaluation tasks' states and on a probe
  set of held-apart training states, paired by state against the warm start. learning.py's
  arms are GRPO and its shuffled-reward null; curriculum_real.py's the two samplers.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import gc
import json
import math
import re
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT / "benchmarks") not in sys.path:  # _record: a script beside this one
    sys.path.append(str(ROOT / "benchmarks"))
from _record import commit, print_table, stamp, write_json  # noqa: E402

# flag -> TrainConfig path (dotted: a section's field); a flag not given leaves the preset's value.
FLAGS = {
    "model": "model.spec", "threads": "model.threads", "tasks": "tasks", "eval_tasks": "eval_tasks",
    "steps": "steps", "group_size": "group_size", "groups_per_step": "groups_per_step",
    "micro_batch": "micro_batch", "max_new_tokens": "max_new_tokens", "sft_steps": "sft.max_steps",
    "sft_max_length": "sft.max_length", "expert_steps": "collect.steps", "stepwise_states": "stepwise.states",
    "executor": "sandbox.executor", "generation": "generation.backend", "engine": "stepwise.engine",
}
# GRPO's settings a run may change from the preset (learning.py's and curriculum_real.py's flags).
SETTINGS = ("lr", "lr_scheduler", "warmup", "groups_per_step", "scale_rewards", "beta", "invalid_groups")

VALIDATION_FIRST_SEED = 1000  # the held-apart episodes' seeds: far from the runs' collect seeds (0, 1, ...)
# Each held-apart set's episodes: the sweep chooses settings on "validation", learning.py reports
# the training reward on "probe"; apart, so that a probe figure is not measured on the very
# states the settings were chosen on. (folder under --work, first episode seed)
HELD_APART = {"validation": ("held-apart", VALIDATION_FIRST_SEED), "probe": ("probe", 2 * VALIDATION_FIRST_SEED)}


# --- results, appended as each piece finishes ----------------------------------------------------


class Results:
    """A JSON file of finished pieces ({"done": {key: entry}} plus the benchmark's header), written
    atomically after each one. A key present was finished by this or an earlier call: skip it.

    Every write puts the file in benchmarks/_record.py's convention: `benchmark`, this call's
    `meta` and `table_of(data)` (the table of what is finished so far) first. A file written
    before the convention (no meta, no table) continues as any other and gains them on its next
    write. The meta of the calls before this one moves to `earlier_meta`: the pieces they
    finished were measured by the commits they name. The settings name the --work folder (`work`)
    as "<work>", so that a call with another --work continues a file whose settings are the same.
    A field the file lacks and whose value now is its value in `defaults` (the same tree; the
    benchmarks' FIELDS_ADDED: the value the code behaved as before it had the field) was added
    to the code after the file was made and keeps what the file measured: it is not a
    difference (`added_at_default`), and the file keeps its settings as they were.
    """

    def __init__(self, path: Path, benchmark: str, settings: Mapping[str, Any],
                 table_of: Callable[[Mapping[str, Any]], dict[str, Any]], argv: Sequence[str] | None = None,
                 work: Path | None = None, defaults: Mapping[str, Any] | None = None):
        self.path, self.benchmark, self.table_of, self.argv = Path(path), benchmark, table_of, argv
        settings = json.loads(json.dumps(settings, default=str))  # as the file holds them
        if work is not None:
            settings = portable(settings, Path(work))
        self.data: dict[str, Any] = {"benchmark": benchmark, "settings": settings, "done": {}}
        if self.path.is_file():
            saved = json.loads(self.path.read_text(encoding="utf-8"))
            if saved.get("benchmark") != benchmark:
                raise ValueError(f"{self.path} holds benchmark {saved.get('benchmark')!r}, not {benchmark!r}")
            defaults = json.loads(json.dumps(defaults or {}, default=str))
            if not added_at_default(saved.get("settings", {}), self.data["settings"], defaults):
                before = saved.get("settings", {})
                changed = sorted(k for k in set(before) | set(settings)
                                 if not added_at_default(before.get(k), settings.get(k), defaults.get(k, {})))
                raise ValueError(f"{self.path} was made with other settings ({', '.join(changed)}: "
                                 f"{differences(before, without_added(self.data['settings'], before, defaults))}); "
                                 "give the same ones to continue "
                                 "it, or another --out")
            if "meta" in saved:
                saved["earlier_meta"] = [*saved.get("earlier_meta", []), saved.pop("meta")]
            self.data = saved

    @property
    def done(self) -> dict[str, Any]:
        return self.data["done"]

    def pending(self, keys: Iterable[str]) -> list[str]:
        return [k for k in keys if k not in self.done]

    def fix(self, key: str, value: Any, why: str = "") -> None:
        """Set `key` once: a later call that finds another value there (other states drawn, say)
        is refused, since the entries done were measured on the first; `why` says more."""
        value = json.loads(json.dumps(value, default=str))
        if key in self.data and self.data[key] != value:
            raise ValueError(f"{self.path} was measured with another {key}{why}: {differences(self.data[key], value)}; "
                             "continue it where it was made (its --work and settings), or start another --out")
        self.data[key] = value
        self.write()

    def record(self, key: str, entry: Any) -> None:
        self.done[key] = entry
        self.write()

    def write(self, **top: Any) -> None:
        self.data.update(top)
        self.data = stamp(self.data, self.benchmark, self.table_of(self.data), self.argv)
        write_json(self.path, self.data, indent=1)


def added_at_default(saved: Any, now: Any, defaults: Any) -> bool:
    """Whether `now` is `saved` (JSON values) but for keys `saved` lacks whose value in `now` is
    their value in `defaults` (a tree of the same shape): fields added to the code since `saved`
    was written, at their defaults."""
    if not (isinstance(saved, dict) and isinstance(now, dict)):
        return saved == now
    defaults = defaults if isinstance(defaults, dict) else {}
    for key in set(saved) | set(now):
        if key not in now:
            return False
        if key not in saved:
            if key not in defaults or now[key] != defaults[key]:
                return False
        elif not added_at_default(saved[key], now[key], defaults.get(key, {})):
            return False
    return True


def without_added(now: Any, saved: Any, defaults: Any) -> Any:
    """`now` without the fields `added_at_default` lets pass (absent from `saved`, at their
    value in `defaults`): what is left to tell apart from `saved`."""
    if not (isinstance(now, dict) and isinstance(saved, dict)):
        return now
    defaults = defaults if isinstance(defaults, dict) else {}
    return {k: without_added(v, saved[k], defaults.get(k, {})) if k in saved else v for k, v in now.items()
            if k in saved or k not in defaults or v != defaults[k]}


def portable(value: Any, work: Path) -> Any:
    """`value` (JSON) with the path `work` written "<work>" wherever a string names it or a path
    inside it, alone or after a scheme ("hf:<work>/tiny-model"); not a longer name it begins."""
    pattern = re.compile(r"(^|:)" + re.escape(str(work)) + r"(?=/|$)")
    if isinstance(value, str):
        return pattern.sub(lambda m: m[1] + "<work>", value)
    if isinstance(value, dict):
        return {k: portable(v, work) for k, v in value.items()}
    if isinstance(value, list):
        return [portable(v, work) for v in value]
    return value


def differences(saved: Any, now: Any, where: str = "", limit: int = 3) -> str:
    """Where two JSON values differ, the first `limit` places: "a.b: 1 then 2"."""
    found: list[str] = []

    def walk(a: Any, b: Any, at: str) -> None:
        if len(found) >= limit:
            return
        if isinstance(a, dict) and isinstance(b, dict):
            for k in sorted(set(a) | set(b), key=str):
                walk(a.get(k), b.get(k), f"{at}.{k}" if at else str(k))
        elif a != b:
            text = [json.dumps(x)[:80] for x in (a, b)]
            found.append(f"{at or 'the value'}: {text[0]} then {text[1]}")

    walk(saved, now, where)
    return "; ".join(found) or "equal"


# --- the paired statistics -------------------------------------------------------------------------


def per_state(evaluation: Mapping[str, Any], headroom_only: bool = False) -> dict[str, list[float]]:
    """{state_id: [reward at each seed]} of an `evaluate` result; headroom_only keeps the states
    where some record says the state has headroom or does not say (draft and debug states)."""
    out: dict[str, list[float]] = {}
    for seed in sorted(evaluation["seeds"], key=int):
        for record in evaluation["seeds"][seed]:
            if headroom_only and record.get("headroom") is False:
                continue
            out.setdefault(record["state_id"], []).append(float(record["reward"]))
    return out


def compare(start: Mapping[str, Any], after: Mapping[str, Any], metric: str = "mean_reward",
            headroom_only: bool = False) -> dict[str, Any]:
    """after - start, paired by state (mleforge.eval.paired), over the states both evaluated."""
    from mleforge.eval.paired import paired_difference

    a, b = per_state(start, headroom_only), per_state(after, headroom_only)
    units = sorted(set(a) & set(b))
    return paired_difference({u: a[u] for u in units}, {u: b[u] for u in units}, metric=metric).to_dict()


def ci_text(d: Mapping[str, Any], *, se: bool = False, counts: bool = True) -> str:
    """A paired difference: mean [95% CI] (n, +up/-down); `se`: mean ± SE [95% CI], and
    `counts` False leaves the ups and downs out (seeds as units: n says it all)."""
    if d.get("diff") is None:
        return "–"
    if d.get("ci_low") is None:
        return f"{d['diff']:+.3f} (n={d['n']})"
    spread = f" ± {d['se']:.3f}" if se else ""
    tail = f", +{d['up']}/-{d['down']}" if counts else ""
    return f"{d['diff']:+.3f}{spread} [{d['ci_low']:+.3f}, {d['ci_high']:+.3f}] (n={d['n']}{tail})"


# --- the shared start --------------------------------------------------------------------------------


@dataclass
class Shared:
    plan: Any  # mleforge.train.plan.Plan of the base config
    executor: Any
    sft: str  # every run's warm_start
    journals: str  # every run's seed journals
    start_spec: str  # the model GRPO starts from
    registry: Any


def overrides(args: Any, model: str) -> dict[str, Any]:
    """The TrainConfig overrides of the flags given (the cpu preset keeps the rest)."""
    from mleforge.config import set_dotted

    out: dict[str, Any] = {"model": {}}
    for flag, key in FLAGS.items():
        value = model if flag == "model" else getattr(args, flag, None)
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


def preset_config(args: Any, work: Path) -> Any:
    """The config every run shares: the cpu preset, the flags given on top, seeded with
    --eval-seed (the warm start's and the drawn states' seed); a run replaces its seed, sft,
    journals and its arm's changes."""
    from mleforge.train.config import TrainConfig

    model = tiny_spec(work) if args.tiny else args.model
    given = overrides(args, model)
    if args.tiny:  # the tiny byte-level tokenizer makes ~4,000-token prompts; ct2 is for real models
        given.setdefault("sft", {}).setdefault("max_length", 16000)
        given.setdefault("stepwise", {}).setdefault("engine", "transformers")
    stepwise = {**given.pop("stepwise", {}), "enabled": True}
    return TrainConfig.preset_config("cpu", **given, warm_start=args.sft, seed=args.eval_seed, stepwise=stepwise)


def shared_executor(config: Any, work: Path) -> Any:
    """The executor of the collect and the evaluations: the one `mleforge train` picks (auto:
    `make_executor("auto")`, the warm pool wherever it isolates its runs, else local), behind a
    result cache (an identical completion of the same state is graded once across all runs)."""
    from mleforge.sandbox import CachingExecutor, make_executor

    sandbox = config.sandbox
    options = {} if sandbox.isolation is None else {"isolation": sandbox.isolation}
    executor = make_executor(sandbox.executor, **options)
    return CachingExecutor(executor, work / "results.sqlite")


def warm_start(args: Any, plan: Any, work: Path, registry: Any, executor: Any, progress: bool) -> tuple[str, str, str]:
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
    """One run: started, continued after a kill (the trainer's own resume), or read back when done.
    A folder holding a run of another config is refused, not continued: the trainer resumes a
    run with its own config, whatever was asked."""
    from mleforge.runs import CONFIG_FILE
    from mleforge.train.recipe import load_run_config, resume, train

    if (folder / CONFIG_FILE).is_file():
        stored = load_run_config(folder).to_dict()
        conflicts = config_conflicts(stored, config.to_dict())
        if conflicts:
            raise ValueError(f"{folder} holds a run of another config ({'; '.join(conflicts[:3])}); this call's run "
                             "would be that one continued. Move that folder away, or give another --work")
        return resume(folder, registry=registry, progress=progress)
    return train(config, folder, registry=registry, progress=progress)


def config_conflicts(stored: Any, asked: Any, at: str = "") -> list[str]:
    """Where a run's stored config (JSON) is not the one asked: every field the ask sets, that is
    not None or "auto" (which the run resolved: bf16, the generation backend)."""
    if isinstance(asked, dict) and isinstance(stored, dict):
        return [c for k in asked for c in config_conflicts(stored.get(k), asked[k], f"{at}.{k}" if at else k)]
    if asked is None or asked == "auto" or json.loads(json.dumps(stored)) == json.loads(json.dumps(asked)):
        return []
    return [f"{at}: {json.dumps(stored)[:60]} there, {json.dumps(asked)[:60]} asked"]


def shared_start(base: Any, args: Any, work: Path, registry: Any, progress: bool) -> Shared:
    """Preflight, task preparation, the cached executor, the collect and the warm start (once)."""
    from mleforge.tasks.preparation import prepare
    from mleforge.train import recipe

    plan = recipe.preflight(base, registry)
    for task in (*plan.tasks, *plan.eval_tasks):
        prepare(task)
    executor = shared_executor(base, work)
    try:
        sft, journals, spec = warm_start(args, plan, work, registry, executor, progress)
    except BaseException:
        executor.close()
        raise
    return Shared(plan, executor, sft, journals, spec, registry)


FINGERPRINT_VERSION = 2
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf")


def fingerprint(shared: Shared) -> dict[str, Any]:
    """What makes the shared starts of two calls one: the SHA-256 of the warm start's weights,
    the weights under them (an adapter's base, as its marker names it) and the buffer's seed
    state ids. A later call with a fresh --work makes its shared start again; where this machine
    makes it bit for bit, the pieces of both calls pair, and `Results.fix` refuses otherwise."""
    import hashlib

    seeds = "\n".join(sorted(train_states_ids(shared.plan, shared.journals)))
    return {"version": FINGERPRINT_VERSION, "warm_start_weights_sha256": weights_sha256(shared.start_spec),
            "buffer_seed_states_sha256": hashlib.sha256(seeds.encode()).hexdigest()}


def weights_sha256(spec: str) -> str:
    """The SHA-256 of the weights a model spec loads: a folder's (or a file's) weight files with
    their names, and, for an adapter, its base's the same way; a bundled model by its
    conversion (mleforge.policies.model_source.base_weights: the GGUF's SHA-256 and how it is
    converted); a hub id by its name only (nothing here says which revision the hub serves)."""
    import hashlib

    from mleforge.policies.model_source import base_weights, read_marker, split_spec

    digest = hashlib.sha256()
    kind, location = split_spec(spec)
    if kind == "bundled":
        digest.update(json.dumps(["bundled", location, base_weights(spec)], sort_keys=True).encode())
        return digest.hexdigest()
    path = Path(location)
    files = [path] if path.is_file() else sorted(
        f for f in path.rglob("*") if f.is_file() and f.suffix in WEIGHT_SUFFIXES) if path.is_dir() else []
    if not files:
        digest.update(spec.encode())  # a hub id
    for f in files:
        digest.update((f.name if f == path else f.relative_to(path).as_posix()).encode() + b"\0")
        with f.open("rb") as stream:
            for block in iter(lambda: stream.read(1 << 20), b""):
                digest.update(block)
    marker = read_marker(path) if path.is_dir() else None
    if marker and marker.get("base"):
        digest.update(b"\0base\0" + weights_sha256(marker["base"]).encode())
    return digest.hexdigest()


def train_states_ids(plan: Any, journals: str) -> set[str]:
    """The ids of the buffer's seed states: every state along the seed journals."""
    from mleforge.curriculum.seeds import journal_states
    from mleforge.expert.episodes import load_journals

    ids = [t.id for t in plan.tasks]
    return {s.state_id for j in load_journals(journals, ids) for s in journal_states(j)}


def held_apart_states(shared: Shared, work: Path, n: int, seed: int, progress: bool,
                      purpose: str = "validation") -> tuple[list[Any], int]:
    """`n` states of the training tasks from expert episodes of their own (made once in the
    folder HELD_APART names for `purpose`), none of them a buffer seed; and how many candidates
    were dropped as seeds."""
    from mleforge.eval.stepwise import draw_states
    from mleforge.expert.collect import CollectConfig, collect_samples

    plan = shared.plan
    steps = plan.config.collect.steps
    episodes = episodes_for(n, len(plan.tasks), steps)  # dropping buffer seeds still leaves n
    config = CollectConfig(tasks=",".join(t.id for t in plan.tasks), episodes=episodes, steps=steps,
                           embedder="tfidf", first_seed=HELD_APART[purpose][1] + seed)
    collected = collect_samples(config, work / HELD_APART[purpose][0], registry=shared.registry, executor=shared.executor,
                                progress=progress)
    candidates = draw_states(list(plan.tasks), n_states=10 * n, seed=seed, journals=collected.journals_dir,
                             stages=plan.config.seed_stages, headroom="require", reward_config=plan.config.reward).states
    seeds = train_states_ids(plan, shared.journals)
    kept = held_apart(candidates, seeds)
    return kept[:n], len(candidates) - len(kept)


def held_apart(candidates: Sequence[Any], buffer_seeds: set[str]) -> list[Any]:
    """The candidates that are not buffer seeds; refused when none is left (a validation or probe
    set of no states would leave every comparison empty and every verdict unresolved, silently)."""
    kept = [s for s in candidates if s.state_id not in buffer_seeds]
    if not kept:
        raise ValueError(f"none of the {len(candidates)} held-apart candidate states is apart from the buffer's "
                         "seed states (the expert's episodes repeat the seed journals' states): collect more "
                         "--expert-steps, or train on other --tasks")
    return kept


def eval_task_states(shared: Shared, work: Path, progress: bool) -> list[Any]:
    """The evaluation tasks' states with headroom, as the run's step-wise evaluation draws them."""
    from mleforge.eval.stepwise import draw_states
    from mleforge.runs import STEPWISE_DIR
    from mleforge.train import recipe

    s = recipe.stage_settings(shared.plan)
    episodes = episodes_for(s.n_states, len(s.eval_tasks), s.expert_steps)
    return list(draw_states(list(s.eval_tasks), n_states=s.n_states, seed=s.seed,
                            work_dir=work / STEPWISE_DIR / "expert", stages=s.stages, headroom="require",
                            registry=shared.registry, steps=s.expert_steps, episodes=episodes,
                            executor=shared.executor, progress=progress, reward_config=s.reward).states)


def episodes_for(n: int, tasks: int, steps: int) -> int:
    """Expert episodes per task for about twice `n` candidate states: an episode of `steps`
    steps holds at most about steps - 1 debug and improve states."""
    return max(1, math.ceil(2 * n / (max(1, tasks) * max(1, steps - 1))))


# --- evaluating a model at several sampling seeds --------------------------------------------------


def evaluate(shared: Shared, spec: str, states: Sequence[Any], seeds: Sequence[int], path: Path,
             max_new_tokens: int | None = None) -> dict[str, Any]:
    """One completion per state at each sampling seed, rewarded; saved in `path` after each seed
    (a seed there is read back, not redone). {"spec", "states": [ids], "seeds": {seed: [records]}},
    and "max_new_tokens" where it is given: the completions' cap instead of the base plan's."""
    from mleforge.eval.stages import make_local_policy
    from mleforge.eval.stepwise import run_stepwise
    from mleforge.train import recipe
    from mleforge.utils.atomic import atomic_write

    ids = [s.state_id for s in states]
    data: dict[str, Any] = {"spec": spec, "states": ids, "seeds": {}}
    if max_new_tokens is not None:
        data["max_new_tokens"] = max_new_tokens
    if path.is_file():
        saved = json.loads(path.read_text(encoding="utf-8"))
        if saved.get("states") == ids and saved.get("spec") == spec \
                and saved.get("max_new_tokens") == data.get("max_new_tokens"):
            data = saved
    todo = [s for s in seeds if str(s) not in data["seeds"]]
    if not todo:
        return data
    settings = recipe.stage_settings(shared.plan)
    sampling = settings.sampling if max_new_tokens is None else \
        dataclasses.replace(settings.sampling, max_new_tokens=max_new_tokens)
    tasks = {t.id: t for t in (*shared.plan.tasks, *shared.plan.eval_tasks)}
    policy = make_local_policy(spec, settings.policy_options)
    try:
        for seed in todo:
            result = run_stepwise(policy, states, tasks, shared.executor, sampling=sampling, seeds=(seed,),
                                  prompt_config=settings.prompt, reward_config=settings.reward, policy_name=spec,
                                  workers=max(1, settings.workers), run_timeout_s=settings.run_timeout_s)
            data["seeds"][str(seed)] = [r.to_dict() for r in result.records]
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(path, json.dumps(data, indent=1, default=str))
    finally:
        policy.close()
    return data


def mean_reward(evaluation: Mapping[str, Any]) -> float | None:
    rewards = [v for values in per_state(evaluation).values() for v in values]
    return sum(rewards) / len(rewards) if rewards else None


# --- a run's training figures, and the flags the benchmarks take ------------------------------------


def read_rollouts(run_dir: Path) -> list[Any]:
    """A run's rollouts (mleforge.train.records.RolloutLine), step by step."""
    from mleforge.runs import ROLLOUTS_DIR
    from mleforge.train.records import RolloutLine

    lines = []
    for path in sorted((run_dir / ROLLOUTS_DIR).glob("step-*.jsonl"), key=lambda p: int(p.stem.split("-")[1])):
        lines += [RolloutLine.from_dict(json.loads(x)) for x in path.read_text(encoding="utf-8").splitlines() if x]
    return lines


def frac_no_valid(groups: Mapping[Any, Sequence[str]]) -> float | None:
    """The fraction of groups (their rollouts' outcomes) with no valid rollout."""
    from mleforge.train.metrics import frac_no_valid_groups

    return frac_no_valid_groups(list(groups.values()))


def run_figures(lines: Sequence[Any]) -> dict[str, Any]:
    """A run's training figures from its rollouts, over the whole run; a group is a (step, group)
    pair; the group figures are mleforge.train.metrics' own: tied (zero advantage), with no
    valid rollout, and either (`frac_groups_no_signal`: nothing learned of the metric); and how
    many distinct states the run drew, and the groups on a state an earlier group drew (a
    sampler can only prefer a state by what its earlier groups showed). And by the state's
    stage: the groups on debug states, the groups that mix valid and failed rollouts (the
    reward's largest gap: a failure earns -0.3 to -0.1, a valid run 0 or more; a lost rollout
    is neither), and per stage (`by_stage`) its groups, those with no valid rollout and those
    mixed."""
    from mleforge.train.metrics import (
        frac_no_signal_groups,
        frac_tied_groups,
        outcome_rates,
        reward_summary,
    )

    rewards: dict[tuple[int, int], list[float | None]] = {}
    outcomes: dict[tuple[int, int], list[str]] = {}
    states: dict[tuple[int, int], str] = {}
    stages: dict[tuple[int, int], str] = {}
    for line in lines:
        rewards.setdefault((line.step, line.group), []).append(line.reward)
        outcomes.setdefault((line.step, line.group), []).append(line.outcome)
        states[(line.step, line.group)] = line.state_id
        stages[(line.step, line.group)] = line.stage
    seen: set[str] = set()
    redrawn = 0
    for group in sorted(states):  # in the order the run drew them
        redrawn += states[group] in seen
        seen.add(states[group])
    mean, _ = reward_summary([line.reward for line in lines])
    rates = outcome_rates([line.outcome for line in lines])
    return {"frac_zero_std_groups": frac_tied_groups(list(rewards.values())), "reward_per_rollout": mean,
            "rollouts": len(lines), "scored": sum(line.reward is not None for line in lines),
            "groups": len(rewards), "train_valid_rate": rates["valid_rate"],
            "train_format_error_rate": rates["format_error_rate"], "frac_groups_no_valid": frac_no_valid(outcomes),
            "frac_groups_no_signal": frac_no_signal_groups(list(rewards.values()), list(outcomes.values())),
            "states_drawn": len(seen), "frac_groups_redrawn": redrawn / len(states) if states else None,
            **stage_figures(outcomes, stages)}


def mixes_valid(outcomes: Sequence[str]) -> bool:
    """A group with a valid rollout and a failed one (a lost rollout is neither)."""
    return "valid" in outcomes and any(o not in ("valid", "lost") for o in outcomes)


def stage_figures(outcomes: Mapping[Any, Sequence[str]], stages: Mapping[Any, str]) -> dict[str, Any]:
    """`run_figures`' figures by stage: groups on debug states and groups mixing valid and
    failed rollouts over the run, and per stage {groups, frac_no_valid, frac_mixed_valid}."""
    n = len(outcomes)
    by_stage: dict[str, dict[str, Any]] = {}
    for stage in sorted(set(stages.values())):
        mine = [outcomes[g] for g in outcomes if stages[g] == stage]
        by_stage[stage] = {"groups": len(mine), "frac_no_valid": sum("valid" not in o for o in mine) / len(mine),
                           "frac_mixed_valid": sum(mixes_valid(o) for o in mine) / len(mine)}
    return {"frac_groups_debug": sum(stages[g] == "debug" for g in outcomes) / n if n else None,
            "frac_groups_mixed_valid": sum(mixes_valid(o) for o in outcomes.values()) / n if n else None,
            "by_stage": by_stage}


def train_figures(run_dir: Path) -> dict[str, Any]:
    """`run_figures` of a run folder's rollouts, and `success_figures` of its buffer."""
    return {**run_figures(read_rollouts(run_dir)), **success_figures(run_dir / BUFFER_FILE)}


BUFFER_FILE = "buffer.sqlite"


def success_figures(path: Path) -> dict[str, Any]:
    """From a run's buffer (its `events`: one per rollout recorded, with the curriculum's own
    success flag, mleforge.curriculum.learnability.is_success): the groups whose rollouts
    partly succeed (some, not all: the groups the Learnability Potential L predicts, its
    1 - E[p^G] - E[(1 - p)^G]) and those none of whose rollouts succeeds. A group is a (step,
    state) pair: a step draws its states without replacement. {} where there is no buffer."""
    import sqlite3
    from contextlib import closing

    if not path.is_file():
        return {}
    with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as conn:
        rows = conn.execute("SELECT step, state_id, success FROM events").fetchall()
    groups: dict[tuple[int, str], list[int]] = {}
    for step, state_id, success in rows:
        groups.setdefault((step, state_id), []).append(int(success))
    if not groups:
        return {"frac_groups_mixed_success": None, "frac_groups_no_success": None}
    return {"frac_groups_mixed_success": sum(0 < sum(g) < len(g) for g in groups.values()) / len(groups),
            "frac_groups_no_success": sum(sum(g) == 0 for g in groups.values()) / len(groups)}


def add_shared_flags(p: Any) -> None:
    """--work, --model, --tiny, --sft, --journals and the cpu preset's settings the benchmarks take."""
    p.add_argument("--out", type=Path, required=True, help="the results JSON (appended as each piece finishes)")
    p.add_argument("--work", required=True, help="the shared warm start, the runs, the evaluations (reused)")
    p.add_argument("--model", default=None, help="bundled:NAME | hf:PATH (default: the cpu preset's)")
    p.add_argument("--tiny", action="store_true", help="a tiny random model built here instead of --model "
                                                       "(its completions are format errors: plumbing only)")
    p.add_argument("--sft", default="auto", help="auto (made once in --work) | none | PATH of an `mleforge sft` run")
    p.add_argument("--journals", help="a folder of collected runs to seed every buffer (default: the shared collect)")
    p.add_argument("--eval-seed", type=int, default=0,
                   help="the seed of the shared parts: the warm start, the states drawn")
    for flag, kind, what in (
        ("--tasks", str, "training tasks: lite | all | ids"), ("--eval-tasks", str, "evaluation tasks"),
        ("--group-size", int, "rollouts per state (G)"), ("--micro-batch", int, "sequences per forward/backward"),
        ("--max-new-tokens", int, "completion length cap"), ("--sft-steps", int, "optimizer steps of --sft auto"),
        ("--sft-max-length", int, "token cap of a warm-start sample"),
        ("--expert-steps", int, "steps of each template-expert episode"),
        ("--stepwise-states", int, "states of the evaluation tasks"),
        ("--executor", str, "auto | local | pool | ray"), ("--generation", str, "auto | trl | vllm | ct2"),
        ("--engine", str, "the evaluations' generation engine: auto | transformers | ct2"),
        ("--threads", int, "torch CPU threads"),
    ):
        p.add_argument(flag, type=kind, default=None, help=f"{what} (default: the cpu preset's)")


def add_arm_flags(p: Any, arms: str) -> None:
    """The flags of `run_arms`: the runs' length, seeds, evaluations, and GRPO's settings."""
    p.add_argument("--steps", type=int, default=32, help="GRPO steps per run")
    p.add_argument("--evals", type=int, default=4, help="checkpoints evaluated (every steps / evals steps)")
    p.add_argument("--seeds", type=int, default=3, help=f"training seeds (each: {arms})")
    p.add_argument("--first-seed", type=int, default=0)
    p.add_argument("--eval-seeds", type=int, default=4, help="sampling seeds per evaluated state")
    p.add_argument("--probe-states", type=int, default=16, help="held-apart states of the training tasks")
    for name, kind in (("lr", float), ("lr_scheduler", str), ("warmup", float), ("groups_per_step", int),
                       ("scale_rewards", str), ("beta", float), ("invalid_groups", str)):
        p.add_argument(f"--{name.replace('_', '-')}", dest=name, type=kind, default=None,
                       help=f"GRPO's {name} for every run (default: the cpu preset's)")


def base_config(args: Any, work: Path) -> Any:
    """`preset_config` of these flags; `steps` is the runs' (where the script has the flag) and
    `groups_per_step` is left to each run (a setting, or a sweep configuration's)."""
    flags = argparse.Namespace(**{**vars(args), "steps": getattr(args, "steps", None), "groups_per_step": None})
    return preset_config(flags, work)


# --- arms over training seeds (learning.py, curriculum_real.py) --------------------------------------

PARTIAL = "partial"  # {seed key: {arm: entry}}: the runs of a seed evaluated while another is still to come
START_RECORDS = "start_evaluations"  # {state set: the warm start's evaluation, compact}


def compact(evaluation: Mapping[str, Any]) -> dict[str, Any]:
    """An evaluation (`evaluate`) with what the comparisons read of each record: its state,
    reward and headroom (not the completions)."""
    return {"spec": evaluation["spec"], "states": evaluation["states"],
            "seeds": {seed: [{k: r.get(k) for k in ("state_id", "reward", "headroom")} for r in records]
                      for seed, records in evaluation["seeds"].items()}}


def checkpoint_steps(steps: int, evals: int) -> list[int]:
    """The steps evaluated: every steps / evals, the last the run's end."""
    if evals < 1 or steps % evals:
        raise SystemExit(f"error: --steps {steps} must be a multiple of --evals {evals}")
    return [steps // evals * k for k in range(1, evals + 1)]


def run_config(base: Any, shared: Any, args: Any, seed: int, changes: Mapping[str, Any]) -> Any:
    """One arm's TrainConfig: the base at `seed` from the shared start, GRPO's settings given as
    flags, the arm's `changes`, and a checkpoint kept at every evaluated step."""
    interval = args.steps // args.evals
    retain = max(base.buffer.retain_evicted_steps, interval)
    return arm_config(base, {k: getattr(args, k) for k in SETTINGS}, changes).replace(
        seed=seed, warm_start=shared.sft, journals=shared.journals, stepwise={"enabled": False}, steps=args.steps,
        save_steps=interval, save_total_limit=max(2, args.evals + 1), buffer={"retain_evicted_steps": retain})


def arm_config(base: Any, settings: Mapping[str, Any], changes: Mapping[str, Any]) -> Any:
    """What an arm changes of the base: GRPO's settings given as flags (`settings`, None where
    not given), then the arm's own `changes` (run_config adds what every arm shares)."""
    given = {k: v for k, v in settings.items() if v is not None}
    return base.replace(**{"shuffle_rewards": False, **given, **copy.deepcopy(dict(changes))})


def checkpoint_spec(run_dir: Path, step: int, last: int, final_model: str) -> str:
    return f"hf:{final_model}" if step == last else f"hf:{run_dir / 'checkpoints' / f'checkpoint-{step}'}"


def arm_entry(shared: Any, folder: Path, result: Any, steps: Sequence[int], sets: Mapping[str, Any],
              starts: Mapping[str, Any], eval_seeds: Sequence[int], work: Path) -> dict[str, Any]:
    """One run's checkpoints evaluated on each state set, paired against the warm start, and
    the commit of the code that measured it (`measured_by`: a file continued over several
    calls holds runs of several commits, and lends them to other files one by one)."""
    out: dict[str, Any] = {"train": train_figures(folder), "checkpoints": {}, "measured_by": commit()}
    for step in steps:
        spec = checkpoint_spec(folder, step, steps[-1], result.final_model)
        point: dict[str, Any] = {}
        for name, states in sets.items():
            after = evaluate(shared, spec, states, eval_seeds, work / "evals" / f"{folder.name}-{step}-{name}.json")
            point[name] = {"mean_reward": mean_reward(after), "per_state": per_state(after),
                           "vs_start": compare(starts[name], after),
                           "vs_start_headroom": compare(starts[name], after, headroom_only=True)}
        out["checkpoints"][str(step)] = point
        gc.collect()
    return out


# Fields of the settings added to the code after results files were made, each with the value
# the code behaved as before it had the field: a file without the field continues where the
# field has that value now (Results, `added_at_default`), and no other. Add a line here with
# every field added to TrainConfig (or a flag of SETTINGS) while a record is being continued.
FIELDS_ADDED: dict[tuple[str, ...], Any] = {
    ("base", "learnability", "success"): "improve",  # before it, L's success was "improve"
}


# Settings of the preset the benchmarks run that a measurement changed after results files were
# made, each with its value before: a file made with that value continues with it, its runs
# trained with it (`as_recorded`), so that a record goes on measuring what it measured. Add a
# line here with every change of the cpu preset (or of a TrainConfig default it keeps) while a
# record is being continued. One value before per setting: after a second change of it, a file
# of the first value is refused (and told what differs).
PRESET_CHANGED: dict[tuple[str, ...], Any] = {}


def as_recorded(base: Any, out: Path, work: Path, changed: Mapping[tuple[str, ...], Any] | None = None,
                progress: bool = True) -> Any:
    """`base` (the preset's TrainConfig for these flags) with each PRESET_CHANGED setting at its
    value before where the results file `out` was made with that value (a file from before a
    FIELDS_ADDED field has that field's value before) and `base` has the preset's own value
    there (a value given as a flag is kept, and refused if the file differs); `base` itself
    for a new file. Any other difference from the file is refused when the file is opened."""
    changed = PRESET_CHANGED if changed is None else changed
    for path in changed:
        if len(path) < 2 or path[0] != "base":
            raise ValueError(f"PRESET_CHANGED {'.'.join(path)}: a setting of the preset is under base")
    out = Path(out)
    if not changed or not out.is_file():
        return base
    saved = json.loads(out.read_text(encoding="utf-8")).get("settings", {})
    added = setting_defaults()
    tree = as_json(base.to_dict())
    now = portable({"base": copy.deepcopy(tree)}, work)  # as the file holds its settings
    preset = portable({"base": as_json(type(base).preset_config(base.preset).to_dict())}, work)
    kept = []
    for path, before in changed.items():
        before = as_json(before)
        theirs = lookup(saved, path)
        if theirs is _MISSING:
            theirs = lookup(added, path)
        if theirs != before or lookup(now, path) == before or lookup(now, path) != lookup(preset, path):
            continue
        node = tree
        for key in path[1:-1]:
            if not isinstance(node, dict) or key not in node:
                raise ValueError(f"PRESET_CHANGED {'.'.join(path)}: TrainConfig has no {key!r} there")
            node = node[key]
        node[path[-1]] = before
        kept.append(f"{'.'.join(path[1:])} {before} (the preset now: {lookup(now, path)})")
    if not kept:
        return base
    if progress:
        from mleforge.cli.output import err_console

        err_console.print(f"{out} continues with the settings it was made with: {'; '.join(kept)}", highlight=False)
    return type(base).from_dict(tree)


def as_json(value: Any) -> Any:
    """`value` as a JSON file holds it (tuples as lists, other objects as strings)."""
    return json.loads(json.dumps(value, default=str))


def lookup(tree: Any, path: Sequence[str]) -> Any:
    """The value at `path` in nested dicts; a KeyError's stand-in (`_MISSING`) where absent."""
    for key in path:
        if not isinstance(tree, dict) or key not in tree:
            return _MISSING
        tree = tree[key]
    return tree


_MISSING = object()


def setting_defaults() -> dict[str, Any]:
    """FIELDS_ADDED as a tree of the settings' shape (Results' `defaults`)."""
    tree: dict[str, Any] = {}
    for path, value in FIELDS_ADDED.items():
        node = tree
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = value
    return tree


def arm_settings(base: Any, args: Any) -> dict[str, Any]:
    """What a results file of `run_arms` is made with: two files with the same settings (and the
    same shared start) hold runs of the same config for the same arm changes."""
    return {"base": base.to_dict(), "steps": args.steps, "evals": args.evals, "eval_seeds": args.eval_seeds,
            "probe_states": args.probe_states, "settings": {k: getattr(args, k) for k in SETTINGS},
            "journals": args.journals}


def run_arms(args: Any, arms: Mapping[str, Mapping[str, Any]], *, benchmark: str,
             table_of: Callable[[Mapping[str, Any]], dict[str, Any]], registry: Any = None, progress: bool = True,
             argv: Sequence[str] | None = None,
             reuse: Any = None, folders: Mapping[str, str] | None = None,
             prepare: Callable[[Results], None] | None = None) -> Results:
    """For each training seed, a `mleforge train` run per arm (its TrainConfig changes), each kept
    in --out once evaluated (under PARTIAL until its seed's other arms are too), the seed's
    entry recorded when all are. A later call may have a fresh --work (another session: --out is
    all that is kept): it makes the shared start again and goes on only where it is the same,
    bit for bit (`shared_start`: `fingerprint`), and reuses the warm start's evaluation kept in
    --out. `reuse` (curriculum_real.Reuse) may give runs measured elsewhere, the very same runs
    in another results file: `reuse.check(results, early=True)` before the shared start (the
    settings and arms), `reuse.check(results)` once the states are drawn (it refuses a file
    that does not pair before anything is trained, and may put its warm-start evaluation in
    `results`), then `reuse.entry(results, seed key, arm, work)`, an arm's entry or None.
    The arms' changes are recorded in --out (`arms`) and fixed like the settings. A run's folder
    is <work>/runs/<arm>-seed<k>, or `folders[arm]` in place of the arm where given (recorded
    in --out, `folders`): two arms' runs of different configs must not share a folder, since a
    folder with a run in it is continued only where it holds a run of the config asked
    (`train_one`). `prepare(results)` runs once the file is read, before anything else."""
    from mleforge.cli.output import err_console
    from mleforge.tasks.registry import TaskRegistry

    registry = registry or TaskRegistry()
    steps = checkpoint_steps(args.steps, args.evals)
    work = Path(args.work).expanduser().resolve()
    work.mkdir(parents=True, exist_ok=True)
    base = as_recorded(base_config(args, work), Path(args.out), work, progress=progress)
    results = Results(args.out, benchmark, arm_settings(base, args), table_of, argv, work=work,
                      defaults=setting_defaults())
    if prepare is not None:  # the benchmark's own upkeep of what the file holds (curriculum_real.refresh_train)
        prepare(results)
    # Before the shared start (a collect and a warm start on a fresh --work): what the file fixes.
    results.fix("arms", arms, " (each arm's TrainConfig changes: another option of the benchmark, such as "
                              "curriculum_real's --success, needs another --out)")
    if folders:
        results.fix("folders", dict(folders))
    if reuse is not None:
        reuse.check(results, early=True)
    started = time.perf_counter()
    shared = shared_start(base, args, work, registry, progress)
    try:
        unpaired = not results.done and not any(results.data.get(PARTIAL, {}).values())
        if unpaired:  # nothing measured depends on them yet: this call's count
            for key in ("shared_start", "start", START_RECORDS):
                results.data.pop(key, None)
        if not unpaired and "shared_start" not in results.data:
            err_console.print(f"[yellow]{args.out} was made before the shared start was recorded: only the warm "
                              "start's evaluation checks that this call's pairs with it[/]", highlight=False)
        results.fix("shared_start", fingerprint(shared),
                    " (a warm start or buffer seed states made otherwise: another machine, library or commit)")
        probe, dropped = held_apart_states(shared, work, args.probe_states, args.eval_seed, progress, purpose="probe")
        sets = {"eval": eval_task_states(shared, work, progress), "probe": probe}
        if not sets["eval"]:
            raise ValueError("no evaluation states: name --eval-tasks the runs do not train on")
        eval_seeds = list(range(args.eval_seeds))
        results.fix("state_ids", {name: [s.state_id for s in states] for name, states in sets.items()})
        if reuse is not None:
            reuse.check(results)
        # The warm start's evaluation, kept in --out: a later call of the same shared start reuses it.
        starts = results.data.get(START_RECORDS) or {
            name: evaluate(shared, shared.start_spec, states, eval_seeds, work / "evals" / f"start-{name}.json")
            for name, states in sets.items()}
        results.write(states={name: [s.state_id for s in states] for name, states in sets.items()},
                      probe_dropped_as_buffer_seeds=dropped, eval_seeds=eval_seeds,
                      **{START_RECORDS: {name: compact(e) for name, e in starts.items()}})
        # Sampled again only for a file from before start_evaluations: then it must repeat value for value.
        results.fix("start", {name: {"mean_reward": mean_reward(e), "per_state": per_state(e)}
                              for name, e in starts.items()}, " (the warm start's evaluation did not repeat)")
        todo = results.pending(f"seed{s}" for s in range(args.first_seed, args.first_seed + args.seeds))
        for i, key in enumerate(todo):
            seed = int(key.removeprefix("seed"))
            entry: dict[str, Any] = {"seed": seed, "arms": {}}
            finished = results.data.setdefault(PARTIAL, {}).setdefault(key, {})  # a run of it an earlier call evaluated
            for arm, changes in arms.items():
                if arm not in finished and reuse is not None:
                    found = reuse.entry(results, key, arm, work)
                    if found is not None:
                        finished[arm] = found
                        results.write()
                if arm in finished:
                    entry["arms"][arm] = finished[arm]
                    continue
                if progress:
                    err_console.print(f"[bold][{i + 1}/{len(todo)}] {arm} seed {seed}[/]  ({args.steps} steps; "
                                      f"elapsed {time.perf_counter() - started:.0f} s)", highlight=False)
                folder = work / "runs" / f"{(folders or {}).get(arm, arm)}-seed{seed}"
                result = train_one(run_config(base, shared, args, seed, changes), folder, registry, progress)
                gc.collect()
                entry["arms"][arm] = finished[arm] = arm_entry(shared, folder, result, steps, sets, starts, eval_seeds,
                                                               work)
                results.write()
            del results.data[PARTIAL][key]
            results.record(key, entry)
    finally:
        shared.executor.close()
    return results


def run_main(run: Callable[..., dict[str, Any]], args: Any, argv: Sequence[str],
             notes: Callable[[Mapping[str, Any]], Sequence[str]]) -> dict[str, Any]:
    """Both scripts' main after parsing: `run(args, argv=argv)` (a refused setting or a broken task
    as `error: ...`), then its table, its `notes` lines and where the JSON went."""
    from mleforge.errors import MleforgeError

    try:
        data = run(args, argv=argv)
    except (MleforgeError, ValueError) as exc:
        raise SystemExit(f"error: {exc}") from None
    print_table(data["table"])
    for line in notes(data):
        print(line)
    print(f"wrote {args.out}")
    return data
