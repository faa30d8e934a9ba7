"""The GPU check's one answer: gpu_check.json, from what its phases left in the work folder.

    python benchmarks/gpu/summary.py WORK OUT_JSON

check.sh runs it after every phase, so a call stopped at its time limit still brings back
what was done. It reads (each optional: a missing one is reported as missing)

    WORK/phases.tsv       name, exit status, wall seconds, limit seconds, log, per phase
    WORK/<phase>.log      the last 2,000 characters of a failed phase's log
    WORK/env.json         benchmarks/gpu/versions.py
    WORK/model.json       benchmarks/gpu/build_model.py's line
    WORK/isolation.json   how the sandbox isolated runs (and whether it fell back to none)
    WORK/probe.json       benchmarks/gpu/train_probe.py: which log-prob path TRL took
    WORK/run/             the training run: config.yaml, run.json, metrics.jsonl
    OUT_JSON's folder/sandbox.json   benchmarks/sandbox.py

and writes the device, the versions, the dtype and mixed precision the run resolved, whether
TRL's Triton log-prob path ran, the GRPO steps done with each step's seconds and rewards, the
sandbox's throughput, and each phase's status and wall time.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import yaml

STEP_FIELDS = ("step", "reward_mean", "reward_std", "valid_rate", "format_error_rate", "exec_error_rate",
               "timeout_rate", "lost_rate", "frac_zero_std_groups", "gen_s", "exec_s", "update_s", "sync_s",
               "tokens", "buffer_size")


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _yaml(path: Path) -> Any:
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return None


def _tail(path: Path, chars: int = 2000) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")[-chars:]
    except OSError:
        return ""


def phases(work: Path) -> list[dict[str, Any]]:
    rows = []
    try:
        lines = (work / "phases.tsv").read_text(encoding="utf-8").splitlines()
    except OSError:
        return rows
    for line in lines:
        name, rc, wall, limit, log = line.split("\t")
        status = {"0": "ok", "124": "timed out", "137": "killed at its limit", "skip": "skipped"}.get(rc, "failed")
        row: dict[str, Any] = {"name": name, "status": status, "rc": None if rc == "skip" else int(rc),
                               "wall_s": float(wall), "limit_s": int(limit)}
        if status != "ok" and log:
            row["error_tail"] = _tail(Path(log))
        rows.append(row)
    return rows


def training(run: Path) -> dict[str, Any]:
    config = _yaml(run / "config.yaml")
    steps = []
    try:
        for line in (run / "metrics.jsonl").read_text(encoding="utf-8").splitlines():
            try:
                row = json.loads(line)
            except ValueError:
                continue
            step = {key: row.get(key) for key in STEP_FIELDS}
            step["step_s"] = round(sum(row.get(k) or 0.0 for k in ("gen_s", "exec_s", "update_s", "sync_s")), 2)
            steps.append(step)
    except OSError:
        pass
    record = _json(run / "run.json") or {}
    model = (config or {}).get("model") or {}
    return {
        "status": record.get("status"), "steps_done": record.get("steps_done", len(steps)),
        "wall_s": record.get("wall_s"), "final_model": record.get("final_model"),
        "resolved": None if config is None else {
            "preset": config.get("preset"), "device": model.get("device"), "dtype": model.get("dtype"),
            "bf16": config.get("bf16"), "generation": config.get("generation"),
            "gradient_checkpointing": model.get("gradient_checkpointing"), "prompt_grad": model.get("prompt_grad"),
            "group_size": config.get("group_size"), "groups_per_step": config.get("groups_per_step"),
            "micro_batch": config.get("micro_batch"), "max_new_tokens": config.get("max_new_tokens"),
            "tasks": config.get("tasks"), "exec_workers": config.get("exec_workers"),
            "isolation": config.get("isolation"),
        },
        "steps": steps,
    }


def logprob_path(probe: Any) -> dict[str, Any]:
    """Whether TRL's fused head ran with Triton: its `_use_triton` answered true on CUDA inside
    trl.trainer.utils (the fused LM head), and mleforge's own CPU path never ran."""
    if not isinstance(probe, dict):
        return {"known": False}
    fused = probe.get("trl_use_triton", {}).get("trl.trainer.utils", {})
    return {"known": True, "triton_used": bool(fused.get("cuda", {}).get("true")),
            "mleforge_cpu_path_calls": probe.get("mleforge_completion_logps"),
            "use_triton_calls": probe.get("trl_use_triton"), "cuda": probe.get("cuda")}


def sandbox(path: Path) -> Any:
    data = _json(path)
    if not isinstance(data, dict):
        return None
    return {"task": data.get("task"), "throughput": data.get("throughput"), "targets": data.get("targets"),
            "pool_leaks": data.get("pool_leaks"),
            "overhead_median_s": {f"{r['backend']} / {r['script']}": r["median_s"] for r in data.get("overhead", [])}}


def summarise(work: Path, out: Path) -> dict[str, Any]:
    env = _json(work / "env.json") or {}
    rows = phases(work)
    torch_view = env.get("torch") or {}
    summary = {
        "ok": bool(rows) and all(r["status"] == "ok" for r in rows),
        "device": {"nvidia_smi": env.get("nvidia_smi"), "torch_device": torch_view.get("device"),
                   "capability": torch_view.get("capability"), "bf16_supported": torch_view.get("bf16_supported"),
                   "cpus": env.get("cpus"), "uid": env.get("uid")},
        "versions": {"python": env.get("python"), "torch": torch_view.get("version"),
                     "cuda": torch_view.get("cuda"), "cudnn": torch_view.get("cudnn"),
                     **{name: (info or {}).get("version") for name, info in (env.get("packages") or {}).items()}},
        "installed_from": {name: (info or {}).get("from") for name, info in (env.get("packages") or {}).items()},
        "trl_logprob_on_device": env.get("trl_logprob"),
        "model": _json(work / "model.json"),
        "isolation": _json(work / "isolation.json"),
        "train": training(work / "run"),
        "logprob_path": logprob_path(_json(work / "probe.json")),
        "sandbox": sandbox(out.parent / "sandbox.json"),
        "phases": rows,
    }
    return summary


def main() -> None:
    work, out = Path(sys.argv[1]), Path(sys.argv[2])
    summary = summarise(work, out)
    temp = out.with_name(out.name + ".partial")
    temp.write_text(json.dumps(summary, indent=1, default=str) + "\n", encoding="utf-8")
    temp.replace(out)  # whole or not at all, should the call be stopped while it writes


if __name__ == "__main__":
    main()
