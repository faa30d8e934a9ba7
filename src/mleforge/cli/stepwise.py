"""`mleforge eval --stepwise`: one sampled completion per fixed expert state; rates with SEMs.

The eval command owns the shared settings (EvalConfig's: policy, tasks, temperature,
max_new_tokens, executor, isolation, workers (2 when not given), run_timeout_s, train_runs, the
local model's options) and `--out`, `--fresh`, `--json`; this module adds the step-wise ones
(StepwiseStatesConfig's, flags generated from its fields) and the handler.

    mleforge eval --stepwise --policy bundled:qwen2.5-coder-0.5b --tasks penguins,digits \\
        --states 24 --state-seed 0 --prompt-profile compact
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


def eval_configs(args: argparse.Namespace) -> tuple[EvalConfig, StepwiseStatesConfig]:
    """The eval command's settings: dataclass defaults < `--config FILE` < the flags given; the
    step-wise keys go to StepwiseStatesConfig, the rest to EvalConfig (with the local model's
    options from --threads, --engine and --quantization)."""
    from mleforge.cli.engine_options import engine_options

    file = tree.load_yaml(args.config) if getattr(args, "config", None) else {}
    data = tree.merge(file, tree.given(args))
    names = {f.name for f in fields(StepwiseStatesConfig)}
    grid = {k: v for k, v in data.items() if k not in names}
    policy = grid.get("policy", EvalConfig.policy)
    threads = getattr(args, "threads", None)
    local = {"num_threads": threads} if policy.partition(":")[0] in ("hf", "bundled") and threads else {}
    grid["policy_options"] = {**grid.get("policy_options", {}), **local, **engine_options(args, policy)}
    states = tree.from_dict(StepwiseStatesConfig, {k: v for k, v in data.items() if k in names})
    return EvalConfig.from_dict(grid), states


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


def cmd_eval_stepwise(args: argparse.Namespace) -> int:
    from mleforge.agent.prompt_config import PromptConfig
    from mleforge.cli.output import err_console
    from mleforge.eval.contamination import check_contamination
    from mleforge.eval.stepwise import RESULT_FILE, record_progress, run_stepwise, stepwise_states
    from mleforge.policies import SamplingConfig, make_policy
    from mleforge.sandbox import make_executor

    config, chosen = eval_configs(args)
    registry, tasks = _prepared_tasks(args, config)
    out = _out_dir(args, config.policy)
    contamination = check_contamination(config.policy, [t.id for t in tasks], config.train_runs)
    if contamination.warning:
        err_console.print(f"[bold red]warning:[/] {contamination.warning}", highlight=False)
    quiet = bool(getattr(args, "json", False))
    isolation = {"isolation": config.isolation} if config.isolation else {}
    with make_executor(config.executor, **isolation) as executor:
        states = stepwise_states(tasks, n_states=chosen.states, seed=chosen.state_seed, journals=chosen.journals,
                                 work_dir=out / "expert", stages=chosen.stages, registry=registry,
                                 steps=chosen.expert_steps, executor=executor, progress=not quiet)
        options = {"registry": registry} if config.policy.partition(":")[0] == "template" else {}
        sampling = SamplingConfig(temperature=config.temperature, max_new_tokens=config.max_new_tokens,
                                  seed=chosen.state_seed)
        record = {"kind": "stepwise", "policy": config.policy, "tasks": [t.id for t in tasks],
                  "states": [s.state_id for s in states], "sampling": sampling.to_dict(),
                  "prompt_profile": chosen.prompt_profile, "contamination": contamination.to_dict()}
        _write_json(out / RUN_RECORD, record)
        policy = make_policy(config.policy, **options, **config.policy_options)
        try:
            with record_progress(f"step-wise {config.policy}: generating, then running", len(states),
                                 enabled=not quiet, console=err_console) as on_record:
                result = run_stepwise(policy, states, tasks, executor, sampling=sampling,
                                      prompt_config=PromptConfig.for_profile(chosen.prompt_profile),
                                      policy_name=config.policy, workers=config.workers or STEPWISE_WORKERS,
                                      run_timeout_s=config.run_timeout_s,
                                      contamination=contamination.to_dict(), on_record=on_record)
        finally:
            policy.close()
    _write_json(out / RESULT_FILE, result.to_dict())
    _print_result(result, out, config.policy, len(states), quiet, contamination.warning)
    return 0


def _print_result(result: Any, out: Path, policy: str, n_states: int, quiet: bool, warning: str | None) -> None:
    from mleforge.cli.output import err_console, print_json, print_table
    from mleforge.eval.stepwise import METRICS, RESULT_FILE, pm

    if quiet:
        print_json(result.to_dict())
        return
    metrics = result.metrics
    print_table(f"step-wise evaluation of {policy}: {n_states} states of {len(result.tasks)} tasks",
                ["metric", "mean ± SEM over states", "n"],
                [[name, pm(metrics[key], scale), metrics[key]["n"]] for key, name, scale in METRICS])
    if warning:
        err_console.print(f"[bold red]warning:[/] {warning}", highlight=False)
    err_console.print(f"result: {out / RESULT_FILE}; report: mleforge report {out}", highlight=False)
