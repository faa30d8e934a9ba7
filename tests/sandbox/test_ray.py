"""The Ray executor beyond the shared corpus: task options, forced cancellation, data on the nodes, queueing."""

from __future__ import annotations

import os
import tempfile
import threading
import time
from pathlib import Path

import pytest

from mleforge.sandbox import RunLimits
from mleforge.sandbox.process import marked_processes
from tests.waiting import wait_for

pytest.importorskip("ray", reason="ray is not installed: pip install 'mleforge[ray]'")


@pytest.fixture(scope="module")
def ray_executor(ray_cluster, sandbox_base):
    from mleforge.sandbox.ray_executor import RayExecutor

    with RayExecutor(base_dir=sandbox_base) as executor:
        yield executor


def test_one_task_per_run_with_its_resources_and_no_retry():
    from mleforge.sandbox.ray_executor import task_options

    options = task_options(RunLimits(timeout_s=5, memory_mb=300, cpus=2))
    assert options == {"num_cpus": 2, "memory": 300 << 20, "max_retries": 0, "num_returns": "streaming"}


def test_a_stuck_node_is_force_cancelled(ray_executor, canary, probe, monkeypatch):
    """The node's own timeout is the rule; the driver's ray.cancel(force=True) the backstop."""
    monkeypatch.setattr(ray_executor, "_deadline_s", lambda limits: 1.5)
    script = f"import time\ntime.sleep(60)  # {probe}-stuck"
    start = time.monotonic()
    result = ray_executor.run(script, canary, RunLimits(timeout_s=30, memory_mb=512, cpus=1))
    assert time.monotonic() - start < 10
    assert result.killed_by == "timeout" and result.timed_out
    assert any("ray.cancel force=True" in w for w in result.warnings)
    wait_for(lambda: not marked_processes(f"{probe}-stuck".encode()))  # bwrap and the script die with the worker
    assert marked_processes(f"{probe}-stuck".encode()) == []
    monkeypatch.undo()
    assert ray_executor.run("print('next')", canary).stdout == "next\n"  # a new worker serves


def test_cancel_event(ray_executor, canary):
    cancel = threading.Event()
    threading.Timer(1.0, cancel.set).start()
    start = time.monotonic()
    result = ray_executor.run("import time\ntime.sleep(60)", canary, cancel=cancel)
    assert result.killed_by == "cancelled" and time.monotonic() - start < 15


def test_task_data_is_unpacked_once_per_node(ray_executor, canary):
    from mleforge.sandbox.caching_executor import public_checksum

    ray_executor.run("print(1)", canary)
    root = Path(os.environ.get("MLEFORGE_RAY_DATA") or Path(tempfile.gettempdir()) / f"mleforge-ray-data-{os.getuid()}")
    public = root / public_checksum(canary) / "public"
    assert sorted(p.name for p in public.iterdir()) == sorted(p.name for p in canary.public_dir.iterdir())
    assert not list(public.parent.rglob("answers*"))  # only the public data travels
    for path in public.iterdir():
        assert path.stat().st_mode & 0o777 == 0o444
        assert path.read_bytes() == (canary.public_dir / path.name).read_bytes()


def test_time_in_the_queue_does_not_count(ray_executor, canary):
    limits = RunLimits(timeout_s=4, memory_mb=512, cpus=2)  # the whole 2-CPU cluster: one at a time
    start = time.monotonic()
    results = ray_executor.run_many(["import time\ntime.sleep(2.5)\nprint('done')"] * 2, canary, limits, max_workers=2)
    assert [r.stdout for r in results] == ["done\n", "done\n"], [r.stderr for r in results]
    assert time.monotonic() - start >= 5
