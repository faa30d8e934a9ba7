"""The submission tests again where file modes bind (seconds, where
tests/sandbox/test_unprivileged.py runs the whole sandbox suite as a user): a user's
script can close its submission/ folder or file to the parent (chmod 0500, 0), which
root's cannot (issue 31: the executor's rename raised PermissionError and stopped
training).

As an unprivileged user where that user can run this interpreter, else as root without
any capability (root without CAP_DAC_OVERRIDE and CAP_FOWNER is held to file modes as a
user is)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.sandbox.test_unprivileged import REPO, _user

CAPLESS = ["--bounding-set=-all", "--inh-caps=-all"]


def _who() -> tuple[int, int, list[str]]:
    """(uid, gid, setpriv's options) of the child."""
    try:
        user = _user()
    except pytest.skip.Exception:
        if os.geteuid() != 0 or shutil.which("setpriv") is None:
            raise
        return 0, 0, CAPLESS
    return user.pw_uid, user.pw_gid, [f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--clear-groups"]


def test_the_submission_tests_pass_where_file_modes_bind():
    uid, gid, options = _who()
    home = Path(tempfile.mkdtemp(prefix="mleforge-submission-user-"))
    try:
        os.chmod(home, 0o700)
        os.chown(home, uid, gid)
        env = {
            "PATH": os.environ.get("PATH", os.defpath), "HOME": str(home), "TMPDIR": str(home),
            "MLEFORGE_DATA": str(home / "data"), "PYTHONPATH": str(REPO / "src"),
            "PYTHONDONTWRITEBYTECODE": "1", "OMP_NUM_THREADS": "1", "LANG": "C.UTF-8",
        }
        command = ["setpriv", *options, "--", sys.executable, "-m", "pytest", "-q", "-rs",
                   "-p", "no:cacheprovider", "tests/sandbox/test_submission_bombs.py"]
        done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
        tail = (done.stdout + done.stderr)[-4000:]
        assert done.returncode == 0, tail
        # Nothing skipped: the cases only a user meets (a file it cannot read) ran.
        assert re.search(r"\d+ passed", tail) and " skipped" not in tail, tail
    finally:
        shutil.rmtree(home, ignore_errors=True)
