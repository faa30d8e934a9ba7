"""A node's unpacking of task data (ray_node._unpack), without a cluster: a failure after the
folders were made read-only raises its own error, as the unprivileged user a worker usually
runs as, and a staging folder a killed worker left is removed by the next unpacking."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from mleforge.sandbox.caching_executor import checksum_of_folder
from mleforge.sandbox.ray_node import _unpack, tar_of
from mleforge.sandbox.workspace import remove_tree
from tests.sandbox.test_submission_as_user import _who
from tests.sandbox.test_unprivileged import REPO

UNPACK = """
import sys
from pathlib import Path
from mleforge.sandbox.ray_node import _unpack
try:
    _unpack(sys.argv[2], Path(sys.argv[3]).read_bytes(), Path(sys.argv[1]))
except OSError as exc:
    print(type(exc).__name__, exc.errno)
"""


def task_data(folder: Path) -> tuple[str, bytes]:
    """(checksum, archive) of a small public folder with a subfolder."""
    public = folder / "public"
    (public / "images").mkdir(parents=True)
    (public / "train.csv").write_text("id,y\n1,0\n")
    (public / "images" / "a.txt").write_text("a")
    return checksum_of_folder(public), tar_of(public)


def test_a_failed_move_raises_its_own_error_and_leaves_no_staging():
    """The move fails (a folder of the key's name is there already) after the unpacked data
    was made read-only: a worker that is not root still removes the staging folder, and the
    error raised is the move's, not a PermissionError from the clean-up."""
    home = Path(tempfile.mkdtemp(prefix="mleforge-node-data-"))
    try:
        key, archive = task_data(home / "source")
        (home / "archive.tar").write_bytes(archive)
        root = home / "root"
        (root / key / "leftover").mkdir(parents=True)  # in the way of the move
        command = [sys.executable, "-c", UNPACK, str(root), key, str(home / "archive.tar")]
        if os.geteuid() == 0:  # as the user a worker runs as (or root without the capabilities)
            uid, gid, options = _who()
            for path in [home, *home.rglob("*")]:
                os.chown(path, uid, gid)
            command = ["setpriv", *options, "--", *command]
        env = {"PATH": os.environ.get("PATH", os.defpath), "PYTHONPATH": str(REPO / "src"),
               "PYTHONDONTWRITEBYTECODE": "1", "HOME": str(home), "TMPDIR": str(home)}
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        name, code = done.stdout.split()
        assert name != "PermissionError" and int(code) in (errno.ENOTEMPTY, errno.EEXIST), done.stdout
        assert sorted(p.name for p in root.iterdir()) == [key]  # no staging folder left
    finally:
        remove_tree(home)


def test_a_staging_folder_a_killed_worker_left_is_removed_by_the_next_unpacking(tmp_path):
    key, archive = task_data(tmp_path / "source")
    root = tmp_path / "root"
    stale = root / f"{key}.k1ll3d00" / "public" / "images"  # read-only already, as the worker left it
    stale.mkdir(parents=True)
    (stale / "a.txt").write_text("a")
    for path in (stale, stale.parent, stale / "a.txt"):
        os.chmod(path, 0o444 if path.is_file() else 0o555)
    other = root / "0123abcd.x1y2z3w4"  # another key's: maybe in use, under that key's lock
    other.mkdir()
    (root / f"{key}.lock").touch()
    _unpack(key, archive, root)
    assert sorted(p.name for p in root.iterdir()) == sorted([key, f"{key}.lock", other.name])
    assert checksum_of_folder(root / key / "public") == key
    assert (root / key / "public" / "images" / "a.txt").read_text() == "a"
