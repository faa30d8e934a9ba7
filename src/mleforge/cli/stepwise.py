"""`mleforge eval --stepwise`: one sampled completion per fixed expert state; rates with SEMs.

The eval command owns the shared options; this module adds the step-wise ones and the
handler, which reads these attributes of the eval parser's namespace (with these defaults
when absent): policy ("template"), tasks ("lite"), temperature (0.7), max_new_tokens (2048),
executor ("local"), workers (2), threads, run_timeout, trained_on, out, fresh, json,
data_dir, tasks_dir.

    mleforge eval --stepwise --policy bundled:qwen2.5-coder-0.5b --tasks penguins,digits \\
        --states 24 --state-seed 0 --prompt-profile compact
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
from pathlib import Path
from typing import Any

from mleforge.runs import RUN_RECORD


def add_stepwise_arguments(parser: argparse.ArgumentParser) -> None:
    """The step-wise options (the caller adds `--stepwise` itself, and the eval options)."""
    group = parser.add_argument_group("step-wise evaluation (--stepwise)")
    group.add_argument("--states", type=int, default=24, help="states evaluated (default 24)")
    group.add_argument("--state-seed", type=int, default=0, help="seed of the state draw and of sampling (default 0)")
    group.add_argument("--journals", help="expert journals to draw states from (default: made with the template "
                                          "expert in OUT/expert, once)")
    group.add_argument("--expert-steps", type=int, default=6, help="steps of each expert episode made (default 6)")
    group.add_argument("--stages", default="draft,debug,improve", help="stages of the states (default all)")
    group.add_argument("--prompt-profile", choices=("full", "compact"), default="full",
                       help="prompt profile (default full; compact for the CPU preset)")


def _get(args: argparse.Namespace, name: str, default: Any) -> Any:
    value = getattr(args, name, None)
    return default if value is None else value


def _write_json(path: Path, data: Any) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str), encoding="utf-8")
    os.replace(tmp, path)


def cmd_eval_stepwise(args: argparse.Namespace) -> int:
    from mleforge.agent.prompt_config import PromptConfig
    from mleforge.cli.engine_options import engine_options
    from mleforge.cli.options import executor_options
    from mleforge.cli.output import err_console, print_json, print_table
    from mleforge.errors import ConfigError
    from mleforge.eval.contamination import check_contamination
    from mleforge.eval.runner import safe_name
    from mleforge.eval.stepwise import (
        METRICS,
        RESULT_FILE,
        pm,
        record_progress,
        run_stepwise,
        stepwise_states,
    )
    from mleforge.policies import SamplingConfig, make_policy
    from mleforge.sandbox import make_executor
    from mleforge.tasks.preparation import prepare
    from mleforge.tasks.registry import TaskRegistry

    policy_name = _get(args, "policy", "template")
    registry = TaskRegistry(task_dirs=_get(args, "tasks_dir", ()), data_dir=getattr(args, "data_dir", None))
    tasks = registry.select(_get(args, "tasks", "lite"))
    if not tasks:
        raise ConfigError("the task selector matches no task; see `mleforge tasks list`")
    for task in tasks:
        prepare(task)
    out = Path(_get(args, "out", f"runs/eval-stepwise/{safe_name(policy_name)}")).resolve()
    if getattr(args, "fresh", False) and out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    contamination = check_contamination(policy_name, [t.id for t in tasks], _get(args, "trained_on", ()))
    if contamination.warning:
        err_console.print(f"[bold red]warning:[/] {contamination.warning}", highlight=False)
    quiet = bool(getattr(args, "json", False))

    with make_executor(_get(args, "executor", "local"), **executor_options(args)) as executor:
        stages = tuple(s.strip() for s in args.stages.split(",") if s.strip())
        states = stepwise_states(tasks, n_states=args.states, seed=args.state_seed, journals=args.journals,
                                 work_dir=out / "expert", stages=stages, registry=registry,
                                 steps=args.expert_steps, executor=executor, progress=not quiet)
        prefix = policy_name.partition(":")[0]
        options: dict[str, Any] = {"registry": registry} if prefix == "template" else {}
        if prefix in ("hf", "bundled") and getattr(args, "threads", None):
            options["num_threads"] = args.threads
        options.update(engine_options(args, policy_name))
        sampling = SamplingConfig(temperature=_get(args, "temperature", 0.7),
                                  max_new_tokens=_get(args, "max_new_tokens", 2048), seed=args.state_seed)
        record = {"kind": "stepwise", "policy": policy_name, "tasks": [t.id for t in tasks],
                  "states": [s.state_id for s in states], "sampling": sampling.to_dict(),
                  "prompt_profile": args.prompt_profile, "contamination": contamination.to_dict()}
        _write_json(out / RUN_RECORD, record)
        policy = make_policy(policy_name, **options)
        try:
            with record_progress(f"step-wise {policy_name}: generating, then running", len(states),
                                 enabled=not quiet, console=err_console) as on_record:
                result = run_stepwise(policy, states, tasks, executor, sampling=sampling,
                                      prompt_config=PromptConfig.for_profile(args.prompt_profile),
                                      policy_name=policy_name, workers=_get(args, "workers", 2),
                                      run_timeout_s=getattr(args, "run_timeout", None),
                                      contamination=contamination.to_dict(), on_record=on_record)
        finally:
            policy.close()
    _write_json(out / RESULT_FILE, result.to_dict())
    if quiet:
        print_json(result.to_dict())
        return 0
    metrics = result.metrics
    print_table(f"step-wise evaluation of {policy_name}: {len(states)} states of {len(result.tasks)} tasks",
                ["metric", "mean ± SEM over states", "n"],
                [[name, pm(metrics[key], scale), metrics[key]["n"]] for key, name, scale in METRICS])
    if contamination.warning:
        err_console.print(f"[bold red]warning:[/] {contamination.warning}", highlight=False)
    err_console.print(f"result: {out / RESULT_FILE}; report: mleforge report {out}", highlight=False)
    return 0
