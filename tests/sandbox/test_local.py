"""The local executor with real processes: solutions graded outside, concurrency, cancellation, death."""

from __future__ import annotations

import asyncio
import logging
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from mleforge.errors import ConfigError, SandboxError
from mleforge.grading.grader import grade
from mleforge.sandbox import ExecutionResult, make_executor
from mleforge.sandbox.env import THREAD_VARS
from mleforge.sandbox.local import LocalExecutor
from mleforge.sandbox.process import marked_processes
from tests.sandbox.conftest import CANARY_TASK, run_once_isolated
from tests.waiting import wait_for

SOLUTION = (Path(__file__).parent / "hostile" / "valid_solution.py").read_text()


def test_a_solution_is_graded_in_the_parent(executor, canary):
    result = executor.run(SOLUTION, canary)
    assert result.ok and result.submission_path, result.stderr
    report = grade(canary, result.submission_path)
    assert report.valid_submission and report.score < 0.2
    assert result.cpu_s > 0 and result.peak_memory_mb > 10 and result.wall_s > 0


def test_environment_is_built_from_nothing(executor, canary, secret_env):
    result = executor.run("import os\nfor k, v in sorted(os.environ.items()): print(f'{k}={v}')", canary)
    env = dict(line.split("=", 1) for line in result.stdout.splitlines())
    assert not set(secret_env) & set(env)
    assert env["HOME"].endswith("/working") and env["PYTHONHASHSEED"] == "0"
    assert env["OMP_WAIT_POLICY"] == "PASSIVE"
    assert all(env[name] == str(canary.spec.limits.cpus) for name in THREAD_VARS)
    assert env["MLEFORGE_RUN_ID"] == result.run_id
    allowed = {"PATH", "HOME", "TMPDIR", "LANG", "LC_ALL", "PYTHONHASHSEED", "PYTHONUNBUFFERED",
               "PYTHONDONTWRITEBYTECODE", "MPLBACKEND", "OMP_WAIT_POLICY", "MLEFORGE_RUN_ID", "PWD", *THREAD_VARS}
    assert set(env) <= allowed


def test_mleforge_itself_is_not_importable_inside(executor, canary):
    result = executor.run("import mleforge\nprint(mleforge.__file__)", canary)
    if executor.isolation == "bwrap":
        assert result.returncode == 1 and "ModuleNotFoundError" in result.stderr
    else:  # unisolated: the project is there to be read, as the warnings say
        assert result.ok


@pytest.mark.slow
def test_500_mb_of_pandas_fits_the_default_limits(executor, registry):
    from mleforge.tasks.preparation import prepare

    task = registry.get("titanic")
    prepare(task)
    script = textwrap.dedent("""
        import numpy as np, pandas as pd
        frame = pd.DataFrame(np.ones((6_250_000, 10)))  # 500 MB of float64
        frame["sum"] = frame.sum(axis=1)
        print(round(frame.memory_usage().sum() / 2**20), "MiB", float(frame["sum"].mean()))
    """)
    result = executor.run(script, task)  # the task's own (default) limits
    assert result.ok, result.stderr
    assert "10.0" in result.stdout and result.peak_memory_mb > 500


def test_a_group_runs_concurrently_in_order(executor, canary):
    # The test's Ray cluster has 2 CPUs, and a Ray task may wait a second or two for a worker.
    n, sleep = (2, 3) if executor.name == "ray" else (4, 1)
    scripts = [f"import time\nprint(time.time())\ntime.sleep({sleep})\nprint(time.time())\nprint({i})"
               for i in range(n)]
    # Warm (a pool's zygote, one Ray worker per slot): overlapping runs need n workers up.
    executor.run_many(["import time\ntime.sleep(0.5)"] * n, canary, max_workers=n)
    if executor.name == "ray":  # finished tasks hand their CPUs back a moment later
        import ray

        wait_for(lambda: ray.available_resources().get("CPU", 0) >= n)
    start = time.monotonic()
    results = asyncio.run(executor.run_batch(scripts, canary, max_workers=n))
    elapsed = time.monotonic() - start
    assert [r.stdout.split()[2] for r in results] == [str(i) for i in range(n)]
    assert len({r.run_id for r in results}) == n
    # Every run was sleeping at the same moment (however slow this machine is today).
    spans = [[float(t) for t in r.stdout.split()[:2]] for r in results]
    if executor.name != "ray":
        # Ray may hold a finished task's CPUs and queue the next one on a loaded 2-CPU
        # cluster: overlap is guaranteed only by our own thread pools.
        assert max(s for s, _ in spans) < min(e for _, e in spans), spans
    assert elapsed < 10, f"{n} {sleep}-second runs on {n} workers took {elapsed:.1f}s"
    results = executor.run_many(scripts[:2], canary, max_workers=1)
    assert [r.stdout.split()[2] for r in results] == ["0", "1"]


def test_cancelling_a_batch_kills_its_runs(executor, canary):
    scripts = ["import time\ntime.sleep(60)"] * 2

    async def cancelled():
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(executor.run_batch(scripts, canary, max_workers=2), timeout=1.0)

    start = time.monotonic()
    asyncio.run(cancelled())
    assert time.monotonic() - start < 5
    left = [p.name for p in executor.workspaces_dir.iterdir() if p.name not in ("submissions", ".lock", "zygotes")]
    assert left == []


def test_cancel_event_reports_cancelled(executor, canary):
    import threading

    cancel = threading.Event()
    threading.Timer(0.5, cancel.set).start()
    result = executor.run("import time\ntime.sleep(60)", canary, cancel=cancel)
    assert result.killed_by == "cancelled" and result.wall_s < 5


def test_kept_workspace(executor, canary):
    result = executor.run(SOLUTION, canary, keep=True)
    try:
        ws = Path(result.workspace)
        assert (ws / "submission" / "submission.csv").is_file()
        if executor.name == "ray":  # the workspace stays on the node; the submission comes here
            assert Path(result.submission_path).read_bytes() == (ws / "submission" / "submission.csv").read_bytes()
        else:
            assert Path(result.submission_path) == ws / "submission" / "submission.csv"
        assert os.stat(ws / "working").st_uid == os.getuid()  # handed back to us
    finally:
        from mleforge.sandbox.workspace import remove_tree

        remove_tree(Path(result.workspace).parent)


def describe(pids: list[int]) -> str:
    """For a failure message: each process's state, parent, group, session, children,
    signal masks and command line (which process survived, and why, shows there)."""
    lines = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                state, ppid, pgid, sid = f.read().rsplit(")", 1)[1].split()[:4]
            with open(f"/proc/{pid}/task/{pid}/children") as f:
                children = f.read().split()
            with open(f"/proc/{pid}/status") as f:
                masks = " ".join(line.split()[0] + line.split()[1] for line in f if line.startswith(("Sig", "ShdPnd")))
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")[:160]
        except OSError:
            lines.append(f"pid {pid}: gone")
            continue
        lines.append(f"pid {pid} state {state} ppid {ppid} pgid {pgid} sid {sid} children {children} {masks}: {cmd}")
    return "\n".join(lines)


@pytest.mark.parametrize("kind", ["local", "pool"])
@pytest.mark.parametrize("isolation", ["bwrap", "none"])
def test_nothing_survives_a_killed_parent(kind, isolation, data_root, tmp_path, canary):
    if isolation == "bwrap":
        with LocalExecutor("auto", base_dir=tmp_path / "probe") as probe:
            if probe.isolation != "bwrap":
                pytest.skip("bwrap is not usable here")
    base = tmp_path / "base"
    make = (f"LocalExecutor({isolation!r}, base_dir={str(base)!r})" if kind == "local" else
            f"PoolExecutor({isolation!r}, base_dir={str(base)!r}, preload=['json'])")
    code = textwrap.dedent(f"""
        from mleforge.sandbox.local import LocalExecutor
        from mleforge.sandbox.pool.executor import PoolExecutor
        from mleforge.tasks.registry import TaskRegistry
        task = TaskRegistry(task_dirs=[{str(CANARY_TASK)!r}], include_builtin=False,
                            data_dir={str(data_root)!r}, mlebench=False).get("sandbox-canary")
        executor = {make}
        executor.run("import os, time\\nif os.fork() == 0:\\n    os.setsid()\\ntime.sleep(120)", task)
    """)
    parent = subprocess.Popen([sys.executable, "-c", code])
    try:
        run_id = None
        for _ in range(400):  # wait until the run's processes are up
            runs = [p.name for s in base.glob("*-*") for p in s.iterdir()
                    if p.is_dir() and p.name not in ("submissions", "zygotes")]
            if runs and len(marked_processes(runs[0].encode())) >= 2:
                run_id = runs[0]
                break
            time.sleep(0.05)
        assert run_id, "the run did not start"
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        # The pool's zygote carries the folder in its command line (bwrap) or environment.
        markers = [run_id.encode(), str(base).encode()]
        wait_for(lambda: not any(marked_processes(m) for m in markers))
        survivors = sorted({pid for m in markers for pid in marked_processes(m)})
        assert survivors == [], describe(survivors)
    finally:
        parent.kill()
    # The next executor on the same folder removes what the dead one left.
    with LocalExecutor("none", base_dir=base) as executor:
        own = executor.workspaces_dir
        assert [p for p in base.iterdir() if p != own and p.name != "kept"] == []


@pytest.mark.parametrize("kind", ["local", "pool"])
@pytest.mark.parametrize("isolation", ["auto", "bwrap", None])
@pytest.mark.parametrize("bwrap", ["0", "/nonexistent/bwrap"])
def test_without_a_working_bwrap_it_refuses_to_run(kind, isolation, bwrap, canary, tmp_path, monkeypatch):
    """Fail closed: no bwrap (turned off, or a path that does not work) is an error that
    says why and how to opt out, never an unisolated run (the warm pool's too)."""
    monkeypatch.setenv("MLEFORGE_BWRAP", bwrap)
    monkeypatch.delenv("MLEFORGE_ISOLATION", raising=False)
    executor = make_executor(kind, isolation=isolation, base_dir=tmp_path)
    try:
        with pytest.raises(SandboxError) as info:
            executor.run("open('submission/submission.csv', 'w').write('id\\n')", canary)
    finally:
        executor.close()
    message = str(info.value)
    assert ("turned off by MLEFORGE_BWRAP" if bwrap == "0" else "/nonexistent/bwrap") in message
    assert "--isolation none" in message and "MLEFORGE_ISOLATION=none" in message


def test_unisolated_only_when_asked_and_it_says_so_once(caplog, tmp_path, monkeypatch):
    """Deliberately isolation none (by the environment variable): the loud warning once."""
    import mleforge.sandbox.isolation as isolation_module

    monkeypatch.setattr(isolation_module, "_warned", set())
    monkeypatch.setenv("MLEFORGE_ISOLATION", "none")
    with caplog.at_level(logging.WARNING, logger="mleforge.sandbox"):
        for _ in range(2):
            executor = make_executor("local", base_dir=tmp_path)
            assert executor.isolation == "none"
            (warning, *_) = executor.resolve_isolation().warnings
            for plainly in ("UNISOLATED", "private answers", "network", "environment"):
                assert plainly in warning
            executor.close()
    assert sum("UNISOLATED" in r.getMessage() for r in caplog.records) == 1
    monkeypatch.setenv("MLEFORGE_ISOLATION", "sometimes")
    with pytest.raises(ConfigError, match="MLEFORGE_ISOLATION must be one of"):
        LocalExecutor(base_dir=tmp_path)


def test_the_bwrap_used_is_recorded(canary, tmp_path, monkeypatch):
    """The system's bwrap when it works, else the bundled one; each result names it."""
    from mleforge.sandbox import bwrap as bw

    monkeypatch.delenv("MLEFORGE_BWRAP", raising=False)
    candidates = bw.bwrap_candidates()
    if not candidates:
        pytest.skip("no bwrap on this machine, system or bundled")
    bundled = bw.bundled_bwrap()
    chosen, result = run_once_isolated(LocalExecutor, canary, tmp_path)
    assert (chosen.bwrap, chosen.bwrap_source) in candidates
    assert result.bwrap == chosen.bwrap
    assert result.bwrap_version == bw.version_text(bw.bwrap_version(chosen.bwrap)) != "unknown"
    assert ExecutionResult.from_dict(result.to_dict()).bwrap_version == result.bwrap_version
    # The seccomp filter is on (where the architecture is known), and the record says so.
    assert chosen.to_dict()["seccomp"] == ("ptrace denied" if platform.machine() in ("x86_64", "aarch64") else
                                           f"off (no filter for architecture {platform.machine()!r})")
    if bundled is not None:  # the bundled one alone, as on a machine without the system's
        monkeypatch.setenv("MLEFORGE_BWRAP", bundled)
        with LocalExecutor("auto", base_dir=tmp_path) as executor:
            result = executor.run("print('hi')", canary)
        assert result.ok and result.isolation == "bwrap" and result.bwrap == bundled


def test_a_broken_interpreter_is_a_sandbox_error(canary, tmp_path):
    with LocalExecutor("none", base_dir=tmp_path, python="/bin/false") as executor, \
            pytest.raises(SandboxError, match="did not start"):
        executor.run("print(1)", canary)


def test_unknown_executor_kind():
    from mleforge.errors import ConfigError

    with pytest.raises(ConfigError, match="available: local, pool, ray"):
        make_executor("nope")


def test_discard_frees_a_submission(executor, canary):
    result = executor.run(SOLUTION, canary)
    assert Path(result.submission_path).is_file()
    executor.discard(result)
    assert not Path(result.submission_path).exists()


def test_unreadable_public_data_is_refused_as_root(canary, tmp_path):
    from mleforge.sandbox.isolation import require_world_readable

    if os.geteuid() != 0:
        pytest.skip("only root runs the sandbox under a uid of its own")
    folder = tmp_path / "public"
    folder.mkdir()
    (folder / "train.csv").write_text("x\n")
    os.chmod(folder / "train.csv", 0o600)
    with pytest.raises(SandboxError, match="chmod -R a\\+rX"):
        require_world_readable(folder)


def test_worker_processes_work_inside(executor, canary):
    """scikit-learn's n_jobs (loky) and multiprocessing's spawn re-import the script."""
    script = textwrap.dedent("""
        import multiprocessing as mp
        from joblib import Parallel, delayed

        def square(x):
            return x * x

        if __name__ == "__main__":
            print("loky", sum(Parallel(n_jobs=2)(delayed(square)(i) for i in range(10))))
            with mp.get_context("spawn").Pool(2) as pool:
                print("spawn", sum(pool.map(square, range(10))))
    """)
    result = executor.run(script, canary)
    assert result.ok, result.stderr[-3000:]
    assert "loky 285" in result.stdout and "spawn 285" in result.stdout


@pytest.mark.parametrize("kind", ["local", "pool"])
def test_roots_under_host_tmp_stay_visible_inside_private_tmp(kind, canary, sandbox_base):
    """A checkout (and its venv) under /tmp, as a CI clone may be: the run's private /tmp
    must not hide it, while nothing else of the host's /tmp shows (a regression: the
    pool's zygote had imported pandas from there and its runs then failed to import
    pandas' lazily loaded modules)."""
    from mleforge.sandbox.pool.executor import PoolExecutor

    cls = LocalExecutor if kind == "local" else PoolExecutor
    if why := _bwrap_unusable(cls, sandbox_base):
        pytest.skip(f"bwrap is not usable here: {why}")
    outer = Path(tempfile.mkdtemp(prefix="mf-tmproot-", dir="/tmp"))
    try:
        (outer / "secret.txt").write_text("host tmp")
        lib = outer / "lib"
        lib.mkdir()
        (lib / "mf_tmp_module.py").write_text("VALUE = 42\n")
        os.chmod(outer, 0o755)
        script = textwrap.dedent(f"""
            import os, sys
            sys.path.insert(0, {str(lib)!r})
            import mf_tmp_module
            print(mf_tmp_module.VALUE, sorted(os.listdir({str(outer)!r})))
            open('/tmp/' + {outer.name!r} + '.mine', 'w').write('x')
        """)
        with cls("bwrap", base_dir=sandbox_base, extra_ro_binds=[lib], **({"preload": ["json"]} if kind == "pool" else {})) as executor:
            result = executor.run(script, canary)
        assert result.ok, result.stderr
        assert result.stdout.strip() == "42 ['lib']"  # the host's secret.txt beside lib/ is not there
        assert not Path(f"{outer}.mine").exists()
    finally:
        shutil.rmtree(outer)


def _bwrap_unusable(cls, base) -> str | None:
    from tests.sandbox.conftest import _bwrap_works

    return _bwrap_works(cls, base)


def test_outputs_name_the_workspace_as_inside_bwrap(executor, canary):
    """Unisolated too, a script's output shows /workspace, not the run's random folder."""
    result = executor.run("import os\nprint(os.getcwd())\nraise ValueError('boom')", canary)
    assert result.returncode == 1
    assert 'File "/workspace/script.py", line 3' in result.stderr, result.stderr
    # Unisolated the real path (wherever the script prints it) becomes /workspace too.
    assert result.stdout == "/workspace\n" and "mleforge-ws" not in result.stderr


def test_tracebacks_are_those_of_python_script_py(executor, canary):
    """Exactly what `python script.py` prints: no frame of the sandbox's own code."""
    crash = executor.run("def f():\n    raise ValueError('boom')\n\nf()\n", canary)
    assert crash.stderr == (
        'Traceback (most recent call last):\n'
        '  File "/workspace/script.py", line 4, in <module>\n    f()\n'
        '  File "/workspace/script.py", line 2, in f\n    raise ValueError(\'boom\')\n'
        'ValueError: boom\n'
    )
    syntax = executor.run("x = [1, 2\nprint(x)).[0]\n", canary)
    assert syntax.returncode == 1 and "Traceback" not in syntax.stderr, syntax.stderr
    assert syntax.stderr.startswith('  File "/workspace/script.py", line')
    assert "SyntaxError" in syntax.stderr
