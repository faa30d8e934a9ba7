"""The Ray executor across two nodes, beyond the shared corpus: task options, data shipped once
per node, back-pressure, per-run resources, cancellation that kills, and failures named for
whose they are (the cluster's raise; the script's are results)."""

from __future__ import annotations

import secrets
import shutil
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from mleforge.errors import ConfigError, SandboxError
from mleforge.sandbox import RunLimits
from mleforge.sandbox.process import marked_processes
from tests.sandbox.conftest import CANARY_TASK
from tests.waiting import wait_for

pytest.importorskip("ray", reason="ray is not installed: pip install 'mleforge[ray]'")


def marked_sleeper(marker: str, seconds: float) -> str:
    """A script whose child process carries `marker` in its command line (what /proc shows
    of a run's process tree) and sleeps `seconds`, as does the script."""
    return (
        "import subprocess, sys, time\n"
        f"child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep({seconds})', '{marker}'])\n"
        f"print(time.time(), flush=True)\ntime.sleep({seconds})\nchild.wait()\nprint(time.time())\n"
    )


def marked_exec(marker: str, seconds: float) -> str:
    """A script that becomes a process carrying `marker` in its command line (no child)."""
    return ("import os, sys\n"
            f"os.execv(sys.executable, [sys.executable, '-c', 'import time; time.sleep({seconds})', '{marker}'])\n")


def ray_executor(sandbox_base, **options):
    from mleforge.sandbox.ray_executor import RayExecutor

    return RayExecutor(base_dir=sandbox_base, **{"isolation": "auto", **options})


@pytest.fixture(scope="module")
def salted(tmp_path_factory, data_root):
    """The canary task under a new id, with a file of its own in the public data: task
    data no node has seen yet in this session."""
    from mleforge.tasks.preparation import prepare
    from mleforge.tasks.registry import TaskRegistry

    folder = tmp_path_factory.mktemp("tasks") / "ray-salted"
    shutil.copytree(CANARY_TASK, folder)
    spec = folder / "task.yaml"
    spec.write_text(spec.read_text().replace("id: sandbox-canary", "id: ray-salted"))
    with open(folder / "prepare.py", "a") as f:
        f.write(f"    (public / 'salt.txt').write_text('{secrets.token_hex(8)}')\n")
    task = TaskRegistry(task_dirs=[folder], include_builtin=False, data_dir=data_root, mlebench=False).get("ray-salted")
    prepare(task)
    return task


def test_one_task_per_run_with_its_resources_and_no_retry():
    from mleforge.sandbox.ray_executor import task_options

    options = task_options(RunLimits(timeout_s=5, memory_mb=300, cpus=2), {"sandbox": 1}, "SPREAD")
    assert options == {"num_cpus": 2, "memory": 300 << 20, "resources": {"sandbox": 1}, "max_retries": 0,
                       "retry_exceptions": False, "num_returns": "streaming", "scheduling_strategy": "SPREAD"}


def test_bad_options_are_refused(sandbox_base):
    with pytest.raises(ConfigError, match="max_concurrent must be >= 1"):
        ray_executor(sandbox_base, max_concurrent=0)
    with pytest.raises(ConfigError, match="CPUs and memory come from the task's limits"):
        ray_executor(sandbox_base, resources={"CPU": 1})


def test_a_run_no_node_can_hold_is_refused(ray_cluster, canary, sandbox_base):
    too_big = RunLimits(timeout_s=5, memory_mb=1024, cpus=3)
    with ray_executor(sandbox_base) as executor, pytest.raises(ConfigError, match=r"needs 3 CPU, 1024 MiB memory"):
        executor.run("print(1)", canary, too_big)
    with ray_executor(sandbox_base, resources={"nowhere": 1}) as executor, \
            pytest.raises(ConfigError, match="nowhere=1.*have: 2 CPU, 5120 MiB memory, nowhere=0"):
        executor.run("print(1)", canary)


def test_task_data_is_shipped_once_per_node(ray_cluster, salted, sandbox_base):
    from mleforge.sandbox.caching_executor import public_checksum

    rounds = 0
    with ray_executor(sandbox_base, scheduling_strategy="SPREAD") as executor:
        # SPREAD is Ray's preference, not a promise: on a loaded machine one node may take a whole
        # round, so rounds go on (at least 2, at most 6) until both nodes have run some.
        while rounds < 2 or (rounds < 6 and set(executor.node_stats()) != set(ray_cluster.data_dirs)):
            results = executor.run_many(["import time\ntime.sleep(0.5)\nprint(open('input/salt.txt').read())"] * 4,
                                        salted, max_workers=4)
            salt = (salted.public_dir / "salt.txt").read_text()
            assert [r.stdout for r in results] == [salt + "\n"] * 4, [r.stderr for r in results]
            rounds += 1
        stats = executor.node_stats()
    assert set(stats) == set(ray_cluster.data_dirs)  # both nodes ran some
    assert sum(s["runs"] for s in stats.values()) == 4 * rounds
    assert {node: s["data_shipped"] for node, s in stats.items()} == {node: 1 for node in stats}
    key = public_checksum(salted)
    for folder in ray_cluster.data_dirs.values():  # each node's own copy, read-only, public files only
        public = folder / key / "public"
        assert sorted(p.name for p in public.iterdir()) == sorted(p.name for p in salted.public_dir.iterdir())
        assert not list(public.parent.rglob("answers*"))
        for path in public.iterdir():
            assert path.stat().st_mode & 0o777 == 0o444
            assert path.read_bytes() == (salted.public_dir / path.name).read_bytes()
        assert [p.name for p in folder.glob(f"{key}*") if p.is_dir()] == [key]  # no staging left


def _most_at_once(marker: str, done: threading.Event) -> int:
    """The largest number of processes carrying `marker` seen at one time until `done`."""
    most = 0
    while not done.is_set():
        most = max(most, len(marked_processes(marker.encode())))
        time.sleep(0.05)
    return most


def test_back_pressure_holds_runs_past_the_limit(ray_cluster, canary, sandbox_base, probe):
    marker = f"{probe}-bp"
    with ray_executor(sandbox_base, max_concurrent=1) as executor, ThreadPoolExecutor(1) as pool:
        done = threading.Event()
        watching = pool.submit(_most_at_once, marker, done)
        try:  # 3 threads, 4 CPUs in the cluster: only the executor's limit keeps them apart
            results = executor.run_many([marked_sleeper(marker, 1.0)] * 3, canary, max_workers=3)
        finally:
            done.set()
        assert [r.ok for r in results] == [True] * 3, [r.stderr for r in results]
        assert watching.result() == 1
        spans = sorted([float(t) for t in r.stdout.split()] for r in results)
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:])), spans
        assert executor.concurrency == 1


def test_a_caller_waiting_for_a_slot_can_cancel(ray_cluster, canary, sandbox_base, probe):
    marker = f"{probe}-slot"
    with ray_executor(sandbox_base, max_concurrent=1) as executor, ThreadPoolExecutor(1) as pool:
        first_cancel = threading.Event()
        first = pool.submit(executor.run, marked_sleeper(marker, 60), canary, cancel=first_cancel)
        assert wait_for(lambda: marked_processes(marker.encode()))
        cancel = threading.Event()
        threading.Timer(0.5, cancel.set).start()
        waiting = executor.run(marked_sleeper(f"{marker}-second", 60), canary, cancel=cancel)
        assert waiting.killed_by == "cancelled" and waiting.wall_s < 5
        assert marked_processes(f"{marker}-second".encode()) == []  # never sent to the cluster
        first_cancel.set()
        assert first.result(timeout=30).killed_by == "cancelled"
    assert wait_for(lambda: not marked_processes(marker.encode()))


def test_per_run_resources_bind_what_a_node_runs_at_once(ray_cluster, canary, sandbox_base):
    """Each run asks for the one `node_b` unit: one run at a time, all on that node; the
    time the second waits in Ray's queue does not count against its timeout."""
    limits = RunLimits(timeout_s=4, memory_mb=512, cpus=1)
    script = "import time\nprint(time.time())\ntime.sleep(2.5)\nprint(time.time())"
    with ray_executor(sandbox_base, resources={"node_b": 1}) as executor:
        results = executor.run_many([script] * 2, canary, limits, max_workers=2)
        assert [r.ok for r in results] == [True, True], [r.stderr for r in results]
        assert set(executor.node_stats()) == {ray_cluster.node_b}
    (a_start, a_end), (b_start, b_end) = sorted([float(t) for t in r.stdout.split()] for r in results)
    assert a_end <= b_start


def test_cancel_kills_the_run_on_its_node(ray_cluster, canary, sandbox_base, probe):
    marker = f"{probe}-cancel"
    cancel = threading.Event()
    with ray_executor(sandbox_base, resources={"node_b": 1}) as executor, ThreadPoolExecutor(1) as pool:
        running = pool.submit(executor.run, marked_sleeper(marker, 60), canary, cancel=cancel)
        assert wait_for(lambda: marked_processes(marker.encode()))
        cancel.set()
        result = running.result(timeout=30)
    assert result.killed_by == "cancelled" and not result.timed_out
    assert wait_for(lambda: not marked_processes(marker.encode()))


@pytest.mark.parametrize("isolation", ["auto", "none"])
def test_a_stuck_node_is_force_cancelled_and_lost(ray_cluster, canary, sandbox_base, probe, monkeypatch, isolation):
    """The node's own timeout is the rule; the driver's ray.cancel(force=True) the backstop,
    and a node that missed its deadline lost the run: no score for the script. The run's
    processes die: with bwrap's pid namespace, or (unisolated) swept on the node once the
    killed worker is gone."""
    marker = f"{probe}-stuck-{isolation}"
    with ray_executor(sandbox_base, isolation=isolation) as executor, ThreadPoolExecutor(1) as pool:
        monkeypatch.setattr(executor, "_deadline_s", lambda limits: 4.0)
        running = pool.submit(executor.run, marked_sleeper(marker, 60), canary,
                              RunLimits(timeout_s=30, memory_mb=512, cpus=1))
        assert wait_for(lambda: marked_processes(marker.encode()))
        with pytest.raises(SandboxError, match="gave no result .* within 4 s"):
            running.result(timeout=30)
        assert wait_for(lambda: not marked_processes(marker.encode()))
        monkeypatch.undo()
        assert executor.run("print('next')", canary).stdout == "next\n"  # a new worker serves


@pytest.fixture(scope="module")
def node_c(ray_cluster):
    """A third node, added last, where bwrap is turned off (MLEFORGE_BWRAP=none): a node that
    cannot isolate runs. The last test of this module kills it."""
    from mleforge.sandbox.ray_node import DATA_ENV
    from mleforge.sandbox.workspace import remove_tree

    data = tempfile.mkdtemp(prefix="mleforge-ray-node-c-")
    node = ray_cluster.cluster.add_node(num_cpus=1, memory=2 << 30, env_vars={"MLEFORGE_BWRAP": "none", DATA_ENV: data})
    ray_cluster.cluster.wait_for_nodes()
    yield node
    if node in ray_cluster.cluster.worker_nodes:
        ray_cluster.cluster.remove_node(node, allow_graceful=False)
    remove_tree(Path(data))


def test_every_node_is_asked_how_it_isolates(ray_cluster, node_c, sandbox_base):
    with ray_executor(sandbox_base) as executor:
        found = executor.probe_nodes()
        assert set(found) == {*ray_cluster.data_dirs, node_c.node_id}
        assert {found[node] for node in ray_cluster.data_dirs} == {"bwrap"}
        assert found[node_c.node_id].startswith("error: SandboxError: "), found
        with pytest.raises(SandboxError, match=f"these Ray nodes cannot run scripts as asked \\({node_c.node_id[:12]}"):
            executor.isolation  # noqa: B018 (the property probes)


def test_a_dead_node_is_the_infrastructures_failure_and_nothing_runs_twice(ray_cluster, node_c, canary, sandbox_base,
                                                                           probe):
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    marker = f"{probe}-doomed"
    # Soft affinity: a retry (there must be none) would find room on the other nodes. Unisolated:
    # node c has no bwrap (the script is ours; it dies with its supervisor, having no children).
    strategy = NodeAffinitySchedulingStrategy(node_c.node_id, soft=True)
    with ray_executor(sandbox_base, isolation="none", scheduling_strategy=strategy) as executor, \
            ThreadPoolExecutor(1) as pool:
        running = pool.submit(executor.run, marked_exec(marker, 60), canary)
        assert wait_for(lambda: marked_processes(marker.encode()))
        ray_cluster.cluster.remove_node(node_c, allow_graceful=False)
        with pytest.raises(SandboxError, match="lost the run .*not retried"):
            running.result(timeout=60)
        assert executor.node_stats() == {}  # no result came from any node
    assert wait_for(lambda: not marked_processes(marker.encode()))
    assert not wait_for(lambda: marked_processes(marker.encode()), timeout_s=3)  # not started again elsewhere
