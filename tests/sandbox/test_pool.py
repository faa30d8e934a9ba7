"""The warm pool beyond the shared corpus: warm starts, no leaks over many runs, zygote life, isolation between runs."""

from __future__ import annotations

import os
import signal
import tempfile
import textwrap
import threading
import time
from pathlib import Path

import pytest

from mleforge.errors import SandboxError
from mleforge.sandbox import RunLimits
from mleforge.sandbox.pool.executor import PoolExecutor
from mleforge.sandbox.process import marked_processes
from tests.waiting import wait_for

SOLUTION = (Path(__file__).parent / "hostile" / "valid_solution.py").read_text()


@pytest.fixture(scope="module")
def pool(tmp_path_factory):
    with PoolExecutor("auto", base_dir=tmp_path_factory.mktemp("pool")) as executor:
        yield executor


@pytest.fixture
def light(tmp_path):
    """A pool whose zygotes import almost nothing: fast to start, for zygote life tests."""
    with PoolExecutor("auto", base_dir=tmp_path / "light", preload=["json"], max_zygotes=1) as executor:
        yield executor


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            tree.setdefault(ppid, []).append(int(entry))
    return tree


def _descendants(pid: int) -> list[int]:
    tree, found, stack = _children(), [], [pid]
    while stack:
        for child in tree.get(stack.pop(), []):
            found.append(child)
            stack.append(child)
    return found


def test_runs_start_warm_and_reseeded(pool, canary):
    script = textwrap.dedent("""
        import sys
        print("warm" if {"numpy", "pandas", "sklearn"} <= set(sys.modules) else "cold")
        import random, numpy
        print(random.random(), numpy.random.rand())
    """)
    first, second = pool.run_many([script, script], canary, max_workers=2)
    assert first.ok and second.ok, first.stderr + second.stderr
    assert first.stdout.splitlines()[0] == "warm"
    assert first.stdout.splitlines()[1] != second.stdout.splitlines()[1]
    (info,) = pool.zygotes
    assert {"numpy", "pandas", "sklearn"} <= set(info["loaded"]) and info["data_kb"] > 0


def test_100_runs_leave_nothing_behind(pool, canary):
    """The benchmark does 1,000 (`benchmarks/sandbox.py --pool-runs 1000`)."""
    kinds = [
        SOLUTION,
        "import os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(60)\nprint('left a child')",
        "open('working/x', 'w').write('x' * 100000)\nimport tempfile\ntempfile.mkstemp()\n1 / 0",
        "import os\nos.kill(os.getpid(), 9)",
        "import threading, time\nthreading.Thread(target=time.sleep, args=(60,), daemon=True).start()",
    ]
    scripts = [kinds[i % len(kinds)] for i in range(100)]
    pool.run("pass", canary)  # the zygote is up before we count
    fds = sorted(os.listdir("/proc/self/fd"))
    temp = {p for p in os.listdir(tempfile.gettempdir()) if p.startswith("mleforge")}
    results = pool.run_many(scripts, canary, RunLimits(timeout_s=20, memory_mb=1024, cpus=1), max_workers=2)
    for kind, result in zip(scripts, results):
        if kind is SOLUTION:
            assert result.ok and result.submission_path, result.stderr[-2000:]
        pool.discard(result)
    assert sum(r.killed_by == "signal" for r in results) == 20
    (zygote,) = pool.zygotes
    expected = 2 if pool.isolation == "bwrap" else 0  # bwrap's monitor and init, then the zygote
    wait_for(lambda: len(_descendants(zygote["pid"])) == expected)  # shims exit just after reporting
    assert len(_descendants(zygote["pid"])) == expected
    assert all(marked_processes(r.run_id.encode()) == [] for r in results)
    left = sorted(p.name for p in pool.workspaces_dir.iterdir())
    assert left == [".lock", "submissions", "zygotes"]
    assert list((pool.workspaces_dir / "submissions").iterdir()) == []
    assert sorted(os.listdir("/proc/self/fd")) == fds
    assert {p for p in os.listdir(tempfile.gettempdir()) if p.startswith("mleforge")} == temp


def test_runs_cannot_see_each_other(pool, canary):
    if pool.isolation != "bwrap":
        pytest.skip("only the isolated pool separates runs")
    holder = textwrap.dedent("""
        import os, time
        open("working/secret.txt", "w").write("mfsecret-" + "of-run-one")
        print(os.getuid())
        time.sleep(3)
    """)
    spy = textwrap.dedent(f"""
        import glob, os, time
        time.sleep(1)
        print("uid", os.getuid())
        print("pids", sorted(int(p) for p in os.listdir("/proc") if p.isdigit()))
        print("pool root", glob.glob("/mleforge/*"))
        for pattern in ("{pool.workspaces_dir}/*/workspace/working/*", "/proc/*/cwd/working/*", "/proc/*/root/workspace/working/*"):
            for path in glob.glob(pattern):
                try:
                    print("LEAK", path, open(path).read())
                except OSError as exc:
                    print("BLOCKED", path, type(exc).__name__)
    """)
    first, second = pool.run_many([holder, spy], canary, max_workers=2)
    assert first.ok and second.ok, second.stderr
    assert "mfsecret" not in second.stdout and "LEAK" not in second.stdout
    assert "pool root []" in second.stdout
    pids = eval(second.stdout.split("pids ")[1].splitlines()[0])
    assert max(pids) < 10  # its own pid namespace: init, supervisor, the script
    assert first.stdout.split()[0] != second.stdout.split("uid ")[1].split()[0]


def test_memory_limit_comes_on_top_of_the_zygote(pool, canary):
    limits = RunLimits(timeout_s=20, memory_mb=256, cpus=1)
    small, big = pool.run_many(["x = bytearray(200 << 20)\nprint('ok')", "x = bytearray(400 << 20)"],
                               canary, limits, max_workers=2)
    assert small.ok, small.stderr
    assert big.killed_by == "memory" and "MemoryError" in big.stderr


def _zygote_process(started: int) -> int:
    """The zygote itself: `started` may be the bwrap around it."""
    for pid in [started, *_descendants(started)]:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmdline = f.read()
        # bwrap's own command line holds the zygote's too
        if b"\0mleforge-zygote--\0" in cmdline and not cmdline.split(b"\0")[0].endswith(b"bwrap"):
            return pid
    raise AssertionError("no zygote process found")


def test_a_dead_zygote_is_replaced(light, canary, caplog):
    assert light.run("print(1)", canary).ok
    (before,) = light.zygotes
    os.kill(_zygote_process(before["pid"]), signal.SIGKILL)
    result = light.run("print(2)", canary)
    assert result.ok and result.stdout == "2\n"
    (after,) = light.zygotes
    assert after["pid"] != before["pid"]
    assert "zygote" in caplog.text and "died" in caplog.text


def test_a_zygote_per_task_data_bounded(light, tmp_path):
    limits = RunLimits(timeout_s=20, memory_mb=512, cpus=1)
    for name in ("one", "two"):
        folder = tmp_path / name
        folder.mkdir(mode=0o755)
        (folder / "train.csv").write_text(f"x\n{name}\n")
        os.chmod(folder / "train.csv", 0o644)
        result = light.run_public("print(open('input/train.csv').read().split()[1])", "t", folder, limits)
        assert result.ok and result.stdout.strip() == name, result.stderr
        (zygote,) = light.zygotes  # max_zygotes=1: the idle one made room
        assert zygote["key"][0] == str(folder)


def test_a_missing_preload_is_not_fatal(tmp_path, canary):
    with PoolExecutor("auto", base_dir=tmp_path, preload=["json", "no_such_module_mf"]) as executor:
        assert executor.run("import json; print('ok')", canary).ok
        (zygote,) = executor.zygotes
        assert zygote["loaded"] == ["json"] and "no_such_module_mf" in zygote["failed"]


def test_closing_the_pool_ends_runs_in_flight(tmp_path, canary):
    executor = PoolExecutor("auto", base_dir=tmp_path, preload=["json"])
    errors = []

    def run():
        try:
            executor.run("import time\ntime.sleep(60)", canary)
        except SandboxError as exc:
            errors.append(str(exc))

    runner = threading.Thread(target=run)
    runner.start()
    wait_for(lambda: executor.zygotes and executor.zygotes[0]["users"])
    time.sleep(0.5)
    start = time.monotonic()
    executor.close()
    runner.join(30)
    assert not runner.is_alive() and time.monotonic() - start < 15
    assert len(errors) == 1 and "zygote ended during the run" in errors[0]


@pytest.mark.parametrize("isolation", ["auto", "bwrap"])
def test_isolation_needs_root(isolation, tmp_path, monkeypatch):
    """As another user the pool refuses (never silently unisolated), auto included."""
    import mleforge.sandbox.pool.executor as pool_module

    monkeypatch.setattr(pool_module.os, "geteuid", lambda: 1000)
    with pytest.raises(SandboxError, match="needs root") as info:
        PoolExecutor(isolation, base_dir=tmp_path).resolve_isolation()
    assert "--isolation none" in str(info.value)


def test_max_zygotes_is_checked():
    from mleforge.errors import ConfigError

    with pytest.raises(ConfigError, match="max_zygotes"):
        PoolExecutor(max_zygotes=0)
