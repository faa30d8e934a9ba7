"""Part of the sandbox suite again, as an unprivileged user (the usual case for users):
bwrap through a user namespace, the warm pool (a run's user namespace inside the
zygote's), and the hostile corpus through the local executor and the pool, each
isolated and (deliberately) unisolated.

Run from a root-run suite: the same tests in a child pytest under `setpriv` as
$MLEFORGE_TEST_USER (default `nobody`), with HOME, TMPDIR and the data root in a
folder that user owns. Skipped, with the reason, where that cannot be done."""

from __future__ import annotations

import os
import pwd
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
USER_ENV = "MLEFORGE_TEST_USER"
# What runs as the user: the workspace, bomb, refusal and pool tests, and the corpus
# through local-bwrap, pool-bwrap and (deliberately) local-none and pool-none: SELECT
# leaves out Ray's cases (its cluster belongs to the parent).
UNPRIVILEGED_TESTS = (
    "tests/sandbox/test_workspace.py",
    "tests/sandbox/test_submission_bombs.py",
    "tests/sandbox/test_pool.py",
    "tests/sandbox/test_local.py::test_without_a_working_bwrap_it_refuses_to_run",
    "tests/sandbox/test_local.py::test_the_bwrap_used_is_recorded",
    "tests/sandbox/test_local.py::test_nothing_survives_a_killed_parent",
    "tests/sandbox/test_hostile.py",
    "tests/sandbox/test_answers.py",
    "tests/sandbox/test_masks.py",
    "tests/sandbox/test_kernel_state.py",
)
SELECT = "not ray-bwrap"  # test_hostile ids name the executor: [local-bwrap-case]


def _as(uid: int, gid: int, code: str) -> bool:
    """Does `code` run as that user, in this interpreter, started by a process of that
    user (as the executors will start it)?"""
    probe = subprocess.run(["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "--",
                            "/bin/sh", "-c", 'exec "$0" -c "$1"', sys.executable, code], capture_output=True)
    return probe.returncode == 0


def _user() -> pwd.struct_passwd:
    if os.geteuid() != 0:
        pytest.skip("already unprivileged: the whole suite runs as such")
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv (util-linux) is not installed")
    name = os.environ.get(USER_ENV, "nobody")
    try:
        user = pwd.getpwnam(name)
    except KeyError:
        pytest.skip(f"no user {name!r} here; set {USER_ENV} to an unprivileged user")
    if user.pw_uid == 0:
        pytest.skip(f"{name!r} is root; set {USER_ENV} to an unprivileged user")
    real = os.path.realpath(sys.executable)
    if not _as(user.pw_uid, user.pw_gid, "pass"):
        pytest.skip(f"{name} cannot run this interpreter ({real}): a folder above it is closed to other "
                    "users (e.g. /root is 0700: chmod o+x /root, or use a Python installed elsewhere)")
    for path in (REPO / "src", REPO / "tests", Path(sys.prefix)):
        if not _as(user.pw_uid, user.pw_gid, f"import os; os.listdir({str(path)!r})"):
            pytest.skip(f"{name} cannot read {path}; make the checkout and the environment world-readable")
    return user


def test_the_sandbox_suite_as_an_unprivileged_user():
    user = _user()
    home = Path(tempfile.mkdtemp(prefix="mleforge-unprivileged-"))
    try:
        os.chmod(home, 0o700)
        os.chown(home, user.pw_uid, user.pw_gid)
        env = {
            "PATH": os.environ.get("PATH", os.defpath), "HOME": str(home), "TMPDIR": str(home),
            "MLEFORGE_DATA": str(home / "data"), "PYTHONPATH": str(REPO / "src"),
            "PYTHONDONTWRITEBYTECODE": "1", "OMP_NUM_THREADS": "1", "LANG": "C.UTF-8",
        }
        for key in ("MLEFORGE_BWRAP",):  # what picks the bwrap travels; isolation is each test's own
            if key in os.environ:
                env[key] = os.environ[key]
        command = ["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--clear-groups", "--",
                   sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "-k", SELECT,
                   *UNPRIVILEGED_TESTS]
        done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=1800)
        tail = (done.stdout + done.stderr)[-6000:]
        assert done.returncode == 0, tail
        passed = re.search(r"(\d+) passed", tail)
        # The corpus four times (local and pool, bwrap and none) and the rest: well over 200 tests.
        assert passed and int(passed.group(1)) >= 200 and " failed" not in tail, tail
        assert "bwrap is not usable here" not in tail, tail  # isolated runs really ran isolated
        print(tail[-3000:])  # the child's summary, skips and their reasons included (-rs)
    finally:
        shutil.rmtree(home, ignore_errors=True)
