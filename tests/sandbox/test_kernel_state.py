"""No kernel state passes between runs, or from the executor to a run: the keyrings (issue 31).

Every process shares its session keyring with the executor that started it, and its user
keyring with every process of its uid: without the run's seccomp filter (seccomp.py) a
script read a secret the executor's session held, and a key one run left was read by the
next (a second `mleforge exec`, or the next run of the same pool)."""

from __future__ import annotations

import ctypes
import os
import platform
from pathlib import Path

import pytest

KEYRING_SCRIPT = (Path(__file__).parent / "hostile" / "keyring_channel.py").read_text()
NUMBERS = {"x86_64": (248, 249, 250), "aarch64": (217, 218, 219)}
KEY_SPEC_SESSION_KEYRING = -3
KEYCTL_INVALIDATE = 21
SECRET = b"mleforge-keyring-secret-" + b"4f1e"
NAMES = (b"mleforge-executor-secret", b"mleforge-left-by-a-run")


def _syscall(*args) -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc.syscall(*args)


@pytest.fixture
def executor_key():
    """A secret in the executor's own session keyring, as a credential helper would leave."""
    if platform.machine() not in NUMBERS:
        pytest.skip(f"no keyring call numbers for {platform.machine()}")
    add_key, request_key, keyctl = NUMBERS[platform.machine()]
    if _syscall(add_key, b"user", NAMES[0], SECRET, len(SECRET), KEY_SPEC_SESSION_KEYRING) < 0:
        pytest.skip(f"no kernel keyring here: {os.strerror(ctypes.get_errno())}")
    yield SECRET.decode()
    for name in NAMES:  # and whatever a run may have left behind
        while (key := _syscall(request_key, b"user", name, None, 0)) >= 0:
            if _syscall(keyctl, KEYCTL_INVALIDATE, key) < 0:
                break


@pytest.mark.parametrize("kind", ["local", "pool"])
def test_no_key_reaches_a_run_or_passes_to_the_next(kind, canary, sandbox_base, executor_key):
    from mleforge.errors import SandboxError
    from mleforge.sandbox.local import LocalExecutor
    from mleforge.sandbox.pool.executor import PoolExecutor

    cls = LocalExecutor if kind == "local" else PoolExecutor
    with cls("bwrap", base_dir=sandbox_base) as executor:
        try:
            executor.resolve_isolation()
        except SandboxError as exc:
            pytest.skip(f"bwrap does not work here: {exc}")
        first = executor.run(KEYRING_SCRIPT, canary)
        second = executor.run(KEYRING_SCRIPT, canary)  # the same pool's zygote, the same session
    for result in (first, second):
        assert result.returncode == 0, result.stderr
        assert "LEAK" not in result.stdout and executor_key not in result.stdout, result.stdout
        assert "BLOCKED add_key" in result.stdout and "added key" not in result.stdout, result.stdout
