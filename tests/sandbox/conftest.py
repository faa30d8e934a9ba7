"""Fixtures of the sandbox tests: a canary task, executors of each isolation, hostile surroundings."""

from __future__ import annotations

import secrets
import socket
from pathlib import Path

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
    from mleforge.tasks.prepare import prepare

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


@pytest.fixture(scope="session")
def sandbox_base(tmp_path_factory):
    return tmp_path_factory.mktemp("ws-base")


def _bwrap_works(base) -> str | None:
    from mleforge.errors import SandboxError
    from mleforge.sandbox.local import LocalExecutor

    executor = LocalExecutor("bwrap", base_dir=base)
    try:
        executor.resolve_isolation()
        return None
    except SandboxError as exc:
        return str(exc)
    finally:
        executor.close()


@pytest.fixture(scope="session", params=["bwrap", "none"])
def executor(request, sandbox_base):
    """Every executor the corpus runs against: local under bwrap, and local unisolated."""
    from mleforge.sandbox.local import LocalExecutor

    if request.param == "bwrap":
        why = _bwrap_works(sandbox_base)
        if why:
            pytest.skip(f"bwrap is not usable here: {why}")
    executor = LocalExecutor(request.param, base_dir=sandbox_base)
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
