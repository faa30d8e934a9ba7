"""The numerical environment a leaderboard is built in, pinned so that every x86-64-v3 CPU
(AVX2 and FMA: every x86 server and CI runner of the last decade) computes the same bits.

Rebuilding titanic's board with one CPU-dependent layer forced to another level at a time
(`NPY_DISABLE_CPU_FEATURES`, `OPENBLAS_CORETYPE`, glibc's `GLIBC_TUNABLES=glibc.cpu.hwcaps`,
`OMP_NUM_THREADS`) showed what made rebuilt boards differ between machines:

- numpy's SIMD kernels: its default argsort is unstable and its x86-simd-sort kernels
  (AVX2, AVX-512) order ties differently from the scalar one, so TF-IDF's `max_features`
  kept different terms (18 of 262 titanic rows changed for the boosting entries). Fixed at
  the root: `features.TopTermsCounts` breaks those ties by a stable sort. On AVX-512 CPUs
  numpy also has its own exp, log and tanh kernels (the AVX2 build calls glibc's);
- OpenBLAS picks a kernel per CPU (Haswell, SkylakeX, Cooperlake, Zen...), and each sums a
  matrix product in its own order: distances of nearest neighbours, linear models, neural
  networks and PCA move in the last bits, and a tie flips a test row (knn-k50 on titanic);
- thread counts: nothing; every fit runs under `threadpool_limits(1)` (OMP_NUM_THREADS=1
  and =2 gave identical predictions);
- glibc's exp and log have an FMA variant and a plain one with different last bits, but
  every x86-64-v3 CPU takes the FMA one.

So a build runs in a child process whose environment pins OpenBLAS to its Haswell kernels,
turns numpy's AVX-512 kernels off, asks MKL (where numpy uses it) for its AVX2 code path
and allows one thread: on any x86-64-v3 machine its numbers are those of every other.
Where the pin cannot hold (an older or a non-x86 CPU) the build runs unpinned and a board
is compared within a tolerance (`mleforge.reference.leaderboard.score_tolerance`).
"""

from __future__ import annotations

import os
import platform
from collections.abc import Mapping
from typing import Any

PIN_LEVEL = "x86-64-v3"
_THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS")


def _numpy_cpu() -> tuple[list[str], dict[str, bool]]:
    try:
        from numpy._core._multiarray_umath import __cpu_dispatch__, __cpu_features__
    except ImportError:  # numpy < 2
        from numpy.core._multiarray_umath import __cpu_dispatch__, __cpu_features__
    return list(__cpu_dispatch__), dict(__cpu_features__)


def can_pin() -> bool:
    """Whether this CPU runs the pinned level: x86-64 with AVX2 and FMA."""
    _, features = _numpy_cpu()
    return platform.machine().lower() in ("x86_64", "amd64") and bool(features.get("AVX2") and features.get("FMA3"))


def pinned_environment(base: Mapping[str, str] | None = None) -> dict[str, str] | None:
    """`base` (default: this process's environment) with the pin, or None where it cannot hold."""
    if not can_pin():
        return None
    dispatch, _ = _numpy_cpu()
    env = dict(os.environ if base is None else base)
    env.update({name: "1" for name in _THREAD_VARIABLES})
    env.update({
        "OPENBLAS_CORETYPE": "Haswell",
        # Every numpy dispatch target above x86-64-v3 (X86_V4, AVX512_*; older numpy: AVX512F...).
        "NPY_DISABLE_CPU_FEATURES": " ".join(t for t in dispatch if t.startswith("AVX512") or t == "X86_V4"),
        "MKL_CBWR": "AVX2",
        "MKL_ENABLE_INSTRUCTIONS": "AVX2",
    })
    return env


def unpinned_environment(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """One thread, nothing else fixed: for CPUs the pin does not fit."""
    env = dict(os.environ if base is None else base)
    env.update({name: "1" for name in _THREAD_VARIABLES})
    for name in ("OPENBLAS_CORETYPE", "NPY_DISABLE_CPU_FEATURES", "MKL_CBWR", "MKL_ENABLE_INSTRUCTIONS"):
        env.pop(name, None)
    return env


def numerics() -> dict[str, Any]:
    """What decides this process's floating-point results (compare for equality): the pin
    in force, each BLAS library with its kernel, and numpy's SIMD dispatch targets in use."""
    import numpy  # noqa: F401  (loads numpy's BLAS, so threadpoolctl sees it)
    import scipy.linalg  # noqa: F401  (and scipy's, which scikit-learn's Cython code calls)
    from threadpoolctl import threadpool_info

    dispatch, features = _numpy_cpu()
    blas = sorted(
        f"{info.get('internal_api')} {info.get('version')} {info.get('architecture', '')}".strip()
        for info in threadpool_info() if info.get("user_api") == "blas"
    )
    pinned = os.environ.get("OPENBLAS_CORETYPE") == "Haswell" and "NPY_DISABLE_CPU_FEATURES" in os.environ
    return {
        "pin": PIN_LEVEL if pinned else None,
        "blas": blas,
        "numpy_simd": [t for t in dispatch if features.get(t)],
    }


def cpu_info() -> dict[str, Any]:
    """The CPU, for the record: architecture, model name and the features numpy detects."""
    _, features = _numpy_cpu()
    model = platform.processor()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            model = next((line.split(":", 1)[1].strip() for line in handle if line.startswith("model name")), model)
    except OSError:
        pass
    return {"machine": platform.machine(), "model": model, "features": sorted(k for k, v in features.items() if v)}
