"""Fixtures of the sandbox tests: a canary task, executors of each isolation, hostile surroundings."""

from __future__ import annotations

import secrets
import socket
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

CANARY_TASK = Path(__file__).parent / "canary_task"
# Values the parent holds that no run may ever return.
SECRETS = {
    "AWS_SECRET_ACCESS_KEY": "mleforge-test-aws-" + "9d1c0f",
    "HF_TOKEN": "hf_mleforgeTestToken" + "77aa",
    "OPENAI_API_KEY": "sk-mleforge-test-" + "5e5e",
}


@pytest.fixture(scope="session")
def canary_registry(data_root):
    from mleforge.tasks.registry import TaskRegistry

    return TaskRegistry(task_dirs=[CANARY_TASK], include_builtin=False, data_dir=data_root, mlebench=False)


@pytest.fixture(scope="session")
def canary(canary_registry):
    from mleforge.tasks.preparation import prepare

    task = canary_registry.get("sandbox-canary")
    prepare(task)
    return task


@pytest.fixture(scope="session")
def forbidden(canary) -> list[str]:
    """Strings that must never appear in anything a run returns."""
    answer_rows = canary.answers_path.read_text().splitlines()[1:4]
    canary_text = (canary.private_dir / "canary.txt").read_text().strip()
    return [canary_text, *answer_rows, *SECRETS.values()]


@pytest.fixture
def secret_env(monkeypatch):
    """The parent process holds credentials, as a training job would (for one test)."""
    for key, value in SECRETS.items():
        monkeypatch.setenv(key, value)
    return SECRETS


def run_once_isolated(cls, task, base_dir, script="print('hi')"):
    """(the isolation `cls`'s bwrap executor resolved, its result of `script` on `task`);
    the test is skipped where bwrap does not work on this machine."""
    from mleforge.errors import SandboxError

    with cls("bwrap", base_dir=base_dir) as executor:
        try:
            isolation = executor.resolve_isolation()
        except SandboxError as exc:
            pytest.skip(f"bwrap does not work here: {exc}")
        return isolation, executor.run(script, task)


@pytest.fixture(scope="session")
def sandbox_base(tmp_path_factory):
    return tmp_path_factory.mktemp("ws-base")


# Every executor the corpus and the behavioural tests run against: kind-isolation.
EXECUTORS = ("local-bwrap", "local-none", "pool-bwrap", "pool-none", "ray-bwrap")


def _bwrap_works(cls, base) -> str | None:
    from mleforge.errors import SandboxError

    executor = cls("bwrap", base_dir=base)
    try:
        executor.resolve_isolation()
        return None
    except SandboxError as exc:
        return str(exc)
    finally:
        executor.close()


@dataclass
class RayTestCluster:
    """A local Ray cluster of two nodes on this machine (ray.cluster_utils.Cluster)."""

    cluster: Any
    data_dirs: dict[str, Path]  # node id -> its task-data folder ($MLEFORGE_RAY_DATA of that node)
    node_b: str  # the id of the second node, which alone has the custom resource "node_b"


@pytest.fixture(scope="session")
def ray_cluster():
    """Two Ray nodes for the whole session: 2 logical CPUs and 5 GiB of memory resource each,
    each with its own task-data folder (as separate machines have); the second one also
    offers the custom resource `node_b` (1), for tests that must place a run there."""
    ray = pytest.importorskip("ray", reason="ray is not installed: pip install 'mleforge[ray]'")
    from ray.cluster_utils import Cluster

    from mleforge.sandbox.ray_node import DATA_ENV
    from mleforge.sandbox.workspace import remove_tree

    if ray.is_initialized():  # someone else's connection: ours is a cluster of two nodes
        ray.shutdown()
    folders = [Path(tempfile.mkdtemp(prefix=f"mleforge-ray-node-{n}-")) for n in "ab"]
    for folder in folders:  # the sandbox's uid must reach the data
        folder.chmod(0o755)
    # Fast health checks: a node killed by a test is declared dead within seconds.
    head = {"num_cpus": 2, "memory": 5 << 30, "env_vars": {DATA_ENV: str(folders[0])}, "include_dashboard": False,
            "_system_config": {"health_check_period_ms": 500, "health_check_failure_threshold": 4}}
    cluster = Cluster(initialize_head=True, head_node_args=head)
    cluster.add_node(num_cpus=2, memory=5 << 30, resources={"node_b": 1}, env_vars={DATA_ENV: str(folders[1])})
    ray.init(address=cluster.address, log_to_driver=False, configure_logging=False)
    cluster.wait_for_nodes()
    nodes = {n["NodeID"]: n["Resources"] for n in ray.nodes() if n["Alive"]}
    node_b = next(node for node, resources in nodes.items() if resources.get("node_b"))
    data_dirs = {node: folders[1] if node == node_b else folders[0] for node in nodes}
    yield RayTestCluster(cluster, data_dirs, node_b)
    ray.shutdown()
    cluster.shutdown()
    for folder in folders:
        remove_tree(folder)


@pytest.fixture(scope="session", params=EXECUTORS)
def executor(request, sandbox_base):
    """Each executor, under bwrap (skipped where bwrap does not work) and unisolated."""
    from mleforge.sandbox.local import LocalExecutor
    from mleforge.sandbox.pool.executor import PoolExecutor

    kind, isolation = request.param.split("-")
    if kind == "ray":
        request.getfixturevalue("ray_cluster")
        from mleforge.sandbox.ray_executor import RayExecutor

        # SPREAD: the group's runs go to both nodes, not the first one that has room.
        executor = RayExecutor(isolation="auto", base_dir=sandbox_base, scheduling_strategy="SPREAD")
        yield executor
        executor.close()
        return
    cls = LocalExecutor if kind == "local" else PoolExecutor
    if isolation == "bwrap":
        why = _bwrap_works(cls, sandbox_base)
        if why:
            pytest.skip(f"bwrap is not usable here: {why}")
    executor = cls(isolation, base_dir=sandbox_base)
    yield executor
    executor.close()


@pytest.fixture(scope="session")
def probe() -> str:
    """A token unique to this session: what a hostile script leaves behind carries it."""
    return "mfprobe" + secrets.token_hex(6)


@pytest.fixture
def listener():
    """A real TCP server on the parent's loopback; no run may reach it."""
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.setblocking(False)
    yield server
    server.close()
