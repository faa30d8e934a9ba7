"""The environment a script runs with: built from nothing, so no credential of ours leaks."""

from __future__ import annotations

# Libraries that start one thread per core unless told otherwise; a run gets its CPU share.
THREAD_VARS = (
    "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS", "BLIS_NUM_THREADS", "RAYON_NUM_THREADS", "LOKY_MAX_CPU_COUNT",
)
RUN_ID_VAR = "MLEFORGE_RUN_ID"  # also how leftover processes of a run are recognised


def sandbox_env(*, workspace: str, tmpdir: str, python_bin: str, cpus: int, run_id: str) -> dict[str, str]:
    """Nothing is inherited from the parent: not its tokens, not its PYTHONPATH."""
    threads = str(cpus)
    return {
        "PATH": f"{python_bin}:/usr/local/bin:/usr/bin:/bin",
        "HOME": f"{workspace}/working",
        "TMPDIR": tmpdir,
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "PYTHONHASHSEED": "0",
        "PYTHONUNBUFFERED": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
        "MPLBACKEND": "Agg",
        # OpenMP threads that spin while they wait take CPU from the other runs of a group.
        "OMP_WAIT_POLICY": "PASSIVE",
        RUN_ID_VAR: run_id,
        **{name: threads for name in THREAD_VARS},
    }
