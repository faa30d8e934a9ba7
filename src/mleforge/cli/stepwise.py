"""`mleforge eval --stepwise` (k sampled completions per fixed expert state with headroom; rates
with SEMs over states), `--stepwise --compare A B` (two policies on the same states and seeds,
paired) and `mleforge eval compare RESULT_A RESULT_B` (two result files, paired).

The eval command owns the shared settings (EvalConfig's: policy, tasks, temperature,
max_new_tokens, executor, isolation, workers (2 when not given), run_timeout_s, train_runs, the
local model's options) and `--out`, `--fresh`, `--json`; this module adds the step-wise ones
(StepwiseStatesConfig's, flags generated from its fields) and the handlers.

    mleforge eval --stepwise --policy bundled:qwen2.5-coder-0.5b --tasks diabetes,telco-churn \\
        --states 24 --samples 4 --prompt-profile compact
    mleforge eval --stepwise --compare bundled:qwen2.5-coder-0.5b hf:runs/train/x/final --tasks ...
    mleforge eval compare runs/eval-stepwise/a runs/eval-stepwise/b
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
from dataclasses import fields
from pathlib import Path
from typing import Any

from mleforge import config as tree
from mleforge.eval.config import EvalConfig
from mleforge.eval.stepwise_config import StepwiseStatesConfig
from mleforge.runs import RUN_RECORD

STEPWISE_WORKERS = 2  # states run at once when --workers is not given


def add_stepwise_arguments(parser: argparse.ArgumentParser) -> None:
    """The step-wise options (the caller adds `--stepwise` itself, and the eval options)."""
    group = parser.add_argument_group("step-wise evaluation (--stepwise)")
    tree.add_arguments(parser, StepwiseStatesConfig, target=group)
    group.add_argument("--pair-with", metavar="DIR",
                       help="evaluate on the very states and sampling seeds of an earlier `--stepwise` folder "
                            "(its journals, states and seeds; the tasks must be the same), so that `mleforge eval "
                            "compare DIR OUT` pairs them")


def eval_configs(args: argparse.Namespace) -> tuple[EvalConfig, StepwiseStatesConfig]:
    """The eval command's settings: dataclass defaults < `--config FILE` < the flags given; the
    step-wise keys go to StepwiseStatesConfig, the rest to EvalConfig (with the local model's
    options from --threads, --engine and --quantization)."""
    from mleforge.cli.engine_options import engine_options

    data = tree.merge(_config_file(args), tree.given(args))
    names = {f.name for f in fields(StepwiseStatesConfig)}
    grid = {k: v for k, v in data.items() if k not in names}
    policy = grid.get("policy", EvalConfig.policy)
    threads = getattr(args, "threads", None)
    local = {"num_threads": threads} if policy.partition(":")[0] in ("hf", "bundled") and threads else {}
    grid["policy_options"] = {**grid.get("policy_options", {}), **local, **engine_options(args, policy)}
    states = tree.from_dict(StepwiseStatesConfig, {k: v for k, v in data.items() if k in names})
    return EvalConfig.from_dict(grid), states


def _config_file(args: argparse.Namespace) -> dict[str, Any]:
    return tree.load_yaml(args.config) if getattr(args, "config", None) else {}


def _write_json(path: Path, data: Any) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str), encoding="utf-8")
    os.replace(tmp, path)


def _prepared_tasks(args: argparse.Namespace, config: EvalConfig) -> tuple[Any, list]:
    from mleforge.errors import ConfigError
    from mleforge.tasks.preparation import prepare
    from mleforge.tasks.registry import TaskRegistry

    registry = TaskRegistry(task_dirs=getattr(args, "tasks_dir", None) or (), data_dir=getattr(args, "data_dir", None))
    tasks = registry.select(config.tasks)
    if not tasks:
        raise ConfigError("the task selector matches no task; see `mleforge tasks list`")
    for task in tasks:
        prepare(task)
    return registry, tasks


def _out_dir(args: argparse.Namespace, policy: str) -> Path:
    from mleforge.eval.runner import safe_name

    out = Path(getattr(args, "out", None) or f"runs/eval-stepwise/{safe_name(policy)}").resolve()
    if getattr(args, "fresh", False) and out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    return out


def _policy_options(args: argparse.Namespace, config: EvalConfig, spec: str) -> dict[str, Any]:
    """make_policy's options for `spec`: the config's where it is the config's policy, else the
    local model's flags (--threads, --engine, --quantization)."""
    from mleforge.cli.engine_options import engine_options

    if spec == config.policy:
        return dict(config.policy_options)
    threads = getattr(args, "threads", None)
    local = {"num_threads": threads} if spec.partition(":")[0] in ("hf", "bundled") and threads else {}
    return {**local, **engine_options(args, spec)}


def _pair_with(path: str, tasks: list, args: argparse.Namespace) -> dict[str, Any]:
    """The run.json of the `--stepwise` folder `path`: its states, seeds and journals."""
    from mleforge.errors import ConfigError

    file = Path(path) / RUN_RECORD
    try:
        record = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"--pair-with {path}: no readable {RUN_RECORD} there ({exc}); give a folder "
                          "`mleforge eval --stepwise` wrote") from None
    missing = [k for k in ("states", "seeds", "journals", "tasks") if k not in record]
    if record.get("kind") != "stepwise" or missing:
        raise ConfigError(f"--pair-with {path}: not a step-wise evaluation of this version (it lacks "
                          f"{', '.join(missing) or 'kind stepwise'}); evaluate it again, or give the same --tasks, "
                          "--states, --state-seed, --journals, --samples and --sample-seed")
    if sorted(record["tasks"]) != sorted(t.id for t in tasks):
        raise ConfigError(f"--pair-with {path}: it evaluated tasks {','.join(record['tasks'])}; give --tasks "
                          f"{','.join(record['tasks'])}")
    conflicts = pairing_conflicts(record, _config_file(args), tree.given(args))
    if conflicts:
        raise ConfigError(f"--pair-with {path} evaluates that folder's very states and seeds, but "
                          f"{'; '.join(conflicts)}: drop {'them' if len(conflicts) > 1 else 'it'} (or give the "
                          "folder's values)")
    return record


def pairing_conflicts(record: dict[str, Any], file: dict[str, Any], flags: dict[str, Any]) -> list[str]:
    """The settings given (in the --config `file` or as `flags`) that the paired folder's
    `record` fixes otherwise, each with both values; equal ones pass."""
    seeds = record["seeds"]
    fixed: dict[str, Any] = {"states": len(record["states"]), "samples": len(seeds), "sample_seed": seeds[0],
                             "journals": Path(record["journals"]).resolve()}
    out = []
    for name, there in fixed.items():
        source, value = ("--" + name.replace("_", "-"), flags[name]) if name in flags else (
            f"{name} in --config", file.get(name))
        if value is None:  # not given (or null: the default)
            continue
        if (Path(value).resolve() if name == "journals" else value) != there:
            out.append(f"{source} is {value} where the folder has {there}")
    return out


def _evaluate(args: argparse.Namespace, config: EvalConfig, chosen: StepwiseStatesConfig, spec: str, draw: Any,
              seeds: tuple[int, ...], draw_journals: Path | str, tasks: list, registry: Any, executor: Any,
              out: Path, quiet: bool) -> Any:
    """One policy on the draw's states at the chosen seeds; writes run.json and stepwise.json to `out`."""
    from mleforge.agent.prompt_config import PromptConfig
    from mleforge.cli.output import err_console
    from mleforge.eval.contamination import check_contamination
    from mleforge.eval.stepwise import RESULT_FILE, record_progress, run_stepwise
    from mleforge.policies import SamplingConfig, make_policy

    out.mkdir(parents=True, exist_ok=True)
    contamination = check_contamination(spec, [t.id for t in tasks], config.train_runs)
    if contamination.warning:
        err_console.print(f"[bold red]warning:[/] {contamination.warning}", highlight=False)
    sampling = SamplingConfig(temperature=config.temperature, max_new_tokens=config.max_new_tokens, seed=seeds[0])
    record = {"kind": "stepwise", "policy": spec, "tasks": [t.id for t in tasks],
              "states": [s.state_id for s in draw.states], "seeds": list(seeds), "sampling": sampling.to_dict(),
              "prompt_profile": chosen.prompt_profile, "draw": draw.to_dict(), "journals": str(draw_journals),
              "contamination": contamination.to_dict()}
    _write_json(out / RUN_RECORD, record)
    options = {"registry": registry} if spec.partition(":")[0] == "template" else {}
    policy = make_policy(spec, **options, **_policy_options(args, config, spec))
    try:
        with record_progress(f"step-wise {spec}: generating, then running", len(draw.states) * len(seeds),
                             enabled=not quiet, console=err_console) as on_record:
            result = run_stepwise(policy, draw.states, tasks, executor, sampling=sampling, seeds=seeds,
                                  prompt_config=PromptConfig.for_profile(chosen.prompt_profile), policy_name=spec,
                                  workers=config.workers or STEPWISE_WORKERS, run_timeout_s=config.run_timeout_s,
                                  contamination=contamination.to_dict(), draw=draw.to_dict(), on_record=on_record)
    finally:
        policy.close()
    _write_json(out / RESULT_FILE, result.to_dict())
    return result


def cmd_eval_stepwise(args: argparse.Namespace) -> int:
    from mleforge.errors import ConfigError
    from mleforge.eval.stepwise import draw_states, same_states, sample_seeds
    from mleforge.eval.stepwise_compare import COMPARISON_FILE
    from mleforge.sandbox import make_executor

    config, chosen = eval_configs(args)
    compare = list(getattr(args, "compare", None) or [])
    if compare and len(set(compare)) != 2:
        raise ConfigError(f"--compare takes two different policies; got {compare} (for a null control of one "
                          "policy, evaluate it twice at different --sample-seed and run `mleforge eval compare "
                          "A B --other-seeds`)")
    registry, tasks = _prepared_tasks(args, config)
    pair = _pair_with(args.pair_with, tasks, args) if getattr(args, "pair_with", None) else None
    if pair is not None and compare:
        raise ConfigError("--pair-with and --compare: --compare evaluates both policies on one draw already; "
                          "give one of them")
    out = _out_dir(args, "-vs-".join(compare) if compare else config.policy)
    quiet = bool(getattr(args, "json", False))
    isolation = {"isolation": config.isolation} if config.isolation else {}
    with make_executor(config.executor, **isolation) as executor:
        if pair is not None:
            journals = pair["journals"]
            draw = same_states(tasks, pair["states"], journals=journals)
            seeds = tuple(pair["seeds"])
        else:
            journals = Path(chosen.journals).resolve() if chosen.journals else out / "expert"
            draw = draw_states(tasks, n_states=chosen.states, seed=chosen.state_seed, journals=chosen.journals,
                               work_dir=out / "expert", stages=chosen.stages, headroom=chosen.headroom,
                               registry=registry, steps=chosen.expert_steps, executor=executor, progress=not quiet)
            seeds = sample_seeds(chosen.sample_seed, chosen.samples)
        _print_draw(draw, quiet)
        folders = [out / "a", out / "b"] if compare else [out]
        results = [_evaluate(args, config, chosen, spec, draw, seeds, journals, tasks, registry, executor, folder,
                             quiet) for spec, folder in zip(compare or [config.policy], folders)]
    if compare:
        return _finish_comparison(results[0], results[1], (compare[0], compare[1]), out / COMPARISON_FILE, quiet,
                                  other_seeds=False)
    _print_result(results[0], out, config.policy, quiet)
    return 0


def _print_draw(draw: Any, quiet: bool) -> None:
    from mleforge.cli.output import err_console

    if quiet:
        return
    dropped = (f"; {len(draw.dropped)} dropped: no headroom (their reference score is the metric's perfect value)"
               if draw.dropped else "")
    filled = f"; {draw.filled} without headroom filled up the draw" if draw.filled else ""
    err_console.print(f"states: {len(draw.states)} drawn of {draw.candidates} candidates{dropped}{filled}",
                      highlight=False)


def _print_result(result: Any, out: Path, policy: str, quiet: bool) -> None:
    from mleforge.cli.output import err_console, print_json, print_table
    from mleforge.eval.stepwise import METRICS, RESULT_FILE
    from mleforge.eval.stepwise_report import pm

    if quiet:
        print_json(result.to_dict())
        return
    metrics, flat = result.metrics, result.no_headroom
    print_table(f"step-wise evaluation of {policy}: {len(result.states) - flat['n_states']} states with headroom "
                f"of {len(result.tasks)} tasks x {len(result.seeds)} seeds",
                ["metric", "mean ± SEM over states", "states"],
                [[name, pm(metrics[key], scale), metrics[key]["n"]] for key, name, scale in METRICS])
    if flat["n_states"]:
        print_table(f"{flat['n_states']} states without headroom (apart)", ["metric", "mean ± SEM over states"],
                    [[name, pm(flat["metrics"][key], scale)] for key, name, scale in METRICS])
    warning = (result.contamination or {}).get("warning")
    if warning:
        err_console.print(f"[bold red]warning:[/] {warning}", highlight=False)
    err_console.print(f"result: {out / RESULT_FILE}; report: mleforge report {out}", highlight=False)


def _finish_comparison(a: Any, b: Any, labels: tuple[str, str], out: Path | None, quiet: bool, *,
                       other_seeds: bool) -> int:
    from mleforge.cli.output import err_console, print_json, print_table
    from mleforge.eval.stepwise_compare import compare_results, comparison_caption, comparison_rows

    comparison = compare_results(a, b, labels=labels, other_seeds=other_seeds)
    if out is not None:
        _write_json(out, comparison.to_dict())
    if quiet:
        print_json(comparison.to_dict())
        return 0
    columns, rows = comparison_rows(comparison)
    print_table(f"{labels[1]} − {labels[0]}, paired", list(columns), [list(r) for r in rows])
    err_console.print(comparison_caption(comparison), highlight=False)
    if out is not None:
        err_console.print(f"comparison: {out}", highlight=False)
    return 0


def cmd_eval_compare(args: argparse.Namespace) -> int:
    """`mleforge eval compare A [B]`: B − A of two step-wise results on the same states and seeds;
    with one result, its null control (its seeds split in halves)."""
    from mleforge.cli.output import err_console, print_json, print_table
    from mleforge.errors import ConfigError
    from mleforge.eval.stepwise import load_result
    from mleforge.eval.stepwise_compare import comparison_caption, comparison_rows, null_control

    if len(args.results) > 2:
        raise ConfigError(f"compare takes one result (its null control) or two (A, then B); got {len(args.results)}")
    labels = [x.strip() for x in args.labels.split(",")] if args.labels else None
    if labels is not None and len(labels) != len(args.results):
        raise ConfigError(f"--labels: give {len(args.results)} comma-separated names, one per result; got {labels}")
    results = [load_result(r) for r in args.results]
    out = Path(args.out) if args.out else None
    if len(results) == 2:
        names = labels or [str(r) for r in args.results]
        return _finish_comparison(results[0], results[1], (names[0], names[1]), out, args.json,
                                  other_seeds=args.other_seeds)
    control = null_control(results[0], labels[0] if labels else "")
    if out is not None:
        _write_json(out, control.to_dict())
    if args.json:
        print_json(control.to_dict())
        return 0
    columns, rows = comparison_rows(control)
    print_table(f"null control of {control.policy_a}: its seeds in halves", list(columns), [list(r) for r in rows])
    err_console.print(comparison_caption(control), highlight=False)
    return 0
