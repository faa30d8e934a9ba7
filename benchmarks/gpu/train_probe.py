"""`mleforge ARGS...` with the way TRL computed each log-probability counted, for the GPU check.

    python benchmarks/gpu/train_probe.py PROBE_JSON train --preset gpu-1x ...

Runs mleforge's CLI in this process unchanged, after wrapping two functions to count their
calls, and writes PROBE_JSON when it ends (also when it fails):

    trl_use_triton     TRL 1.16's `_use_triton(device)`, by calling module, device type and
                       answer: `trl.trainer.utils` asks it inside the fused LM head, so
                       {"trl.trainer.utils": {"cuda": {"true": n}}} means TRL's Triton
                       log-prob path ran; mleforge.train.grpo.trainer's `compact_head_native` asks
                       it too (through `trl.kernels.chunked_logprob`)
    mleforge_completion_logps   calls of mleforge's own path for devices without Triton
                       (mleforge.train.grpo.trainer.completion_logps): 0 on a GPU
    cuda               the device's name and the peak memory torch allocated

GPU_CHECK_DEVICE=cpu (the CPU test of check.sh) turns the gpu-1x preset's CUDA settings
into a CPU's (device cpu, float32, no bf16) before the CLI reads the preset, and sends the
trainer down its GPU branch (TRL's fused head; see `_cpu_preset`).
"""

from __future__ import annotations

import json
import os
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

COUNTS: dict[str, Any] = {"trl_use_triton": defaultdict(lambda: defaultdict(lambda: defaultdict(int))),
                          "mleforge_completion_logps": 0}


def _count_use_triton() -> None:
    """Wrap `_use_triton` where TRL's modules look it up (each imported it by name). All of them
    are imported first, so that none binds another's wrapper."""
    import importlib

    modules = {}
    for name in ("trl.kernels.chunked_logprob", "trl.kernels.chunked_divergence", "trl.trainer.utils"):
        try:
            modules[name] = importlib.import_module(name)
        except ImportError:
            continue
    original = modules["trl.kernels.chunked_logprob"]._use_triton
    for name, module in modules.items():
        if getattr(module, "_use_triton", None) is not original:
            continue

        def counted(device: Any, _name: str = name) -> bool:
            answer = original(device)
            COUNTS["trl_use_triton"][_name][getattr(device, "type", str(device))][str(answer).lower()] += 1
            return answer

        module._use_triton = counted


def _count_completion_logps() -> None:
    import mleforge.train.grpo.trainer as trainer

    original = trainer.completion_logps

    def counted(*args: Any, **kwargs: Any) -> Any:
        COUNTS["mleforge_completion_logps"] += 1
        return original(*args, **kwargs)

    trainer.completion_logps = counted


def _cpu_preset() -> None:
    """The CPU test: the preset on a CPU, and the trainer on the branch it takes on a GPU (TRL's
    own fused LM head, in torch tiles here where Triton would run there; no regrouping of a
    step's rows), not the CPU's own completion-only path."""
    import mleforge.train.grpo.trainer as trainer
    from mleforge.train.config import PRESETS

    model = PRESETS["gpu-1x"]["model"]
    PRESETS["gpu-1x"].update(model={**model, "device": "cpu", "dtype": "float32"}, bf16=False)
    trainer.compact_head_native = lambda device: True


def _write(path: Path) -> None:
    data: dict[str, Any] = json.loads(json.dumps(COUNTS))
    try:
        import torch

        if torch.cuda.is_available():
            data["cuda"] = {"device": torch.cuda.get_device_name(0),
                            "max_memory_allocated_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2)}
    except ImportError:
        pass
    path.write_text(json.dumps(data, indent=1) + "\n")


def main() -> int:
    path, argv = Path(sys.argv[1]), sys.argv[2:]
    try:
        _count_use_triton()
        _count_completion_logps()
        if os.environ.get("GPU_CHECK_DEVICE") == "cpu":
            _cpu_preset()
        from mleforge.cli.main import main as mleforge

        return mleforge(argv)
    finally:
        _write(path)


if __name__ == "__main__":
    sys.exit(main())
