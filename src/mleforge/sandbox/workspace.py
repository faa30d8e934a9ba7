"""Workspaces: one fresh directory per run, and the per-process folder that holds them.

Layout (the script's cwd is the workspace; scripts use relative paths, which
work the same with and without bwrap):

    <base>/                        $MLEFORGE_SANDBOX_DIR or <tmp>/mleforge-ws-<uid>
      <pid>-<random>/              one session per executor, flock-ed while it lives
        .lock
        <run id>/
          passwd, group            the sandbox's /etc/passwd and /etc/group
          workspace/               the workspace (/workspace inside bwrap)
            script.py              the script
            input/                 the task's public data, read-only
            working/               scratch space, and $HOME
            submission/            the script writes submission/submission.csv here
            tmp/                   $TMPDIR and, inside bwrap, /tmp
        submissions/<run id>/submission.csv   moved out before the run folder is removed
      kept/<run id>/               runs asked to be kept, never removed automatically

A session whose lock nobody holds belongs to a dead process: the next session
removes it, so a killed parent leaves nothing behind for long.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import secrets
import shutil
import stat
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from mleforge.errors import SandboxError

BASE_ENV = "MLEFORGE_SANDBOX_DIR"
SCRIPT_NAME = "script.py"
INPUT_DIR = "input"
WORKSPACE_DIRS = (INPUT_DIR, "working", "submission", "tmp")
SUBMISSION_NAME = "submission.csv"
_LOCK = ".lock"
_UNLOCKED_GRACE_S = 600  # a session folder without a lock file may still be starting


def default_base() -> Path:
    override = os.environ.get(BASE_ENV)
    if override:
        return Path(override).expanduser().resolve()
    return Path(tempfile.gettempdir()) / f"mleforge-ws-{os.getuid()}"


def _private_dir(path: Path) -> None:
    """Create `path` (mode 0700) or accept it only if it is our own real directory.

    In a shared /tmp another user could have planted a symlink or a folder there.
    """
    with contextlib.suppress(FileExistsError):
        path.mkdir(mode=0o700, parents=True)
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
        raise SandboxError(
            f"{path} is not a directory owned by this user; remove it or set {BASE_ENV} to another place"
        )
    if info.st_mode & 0o077:
        os.chmod(path, 0o700)


def remove_tree(path: Path) -> None:
    """Remove a folder a hostile script wrote, whatever modes it left in there."""

    def make_writable(func, failed, exc_info):
        if not isinstance(exc_info[1], PermissionError):
            raise exc_info[1]
        for target in (os.path.dirname(failed), failed):
            with contextlib.suppress(OSError, NotImplementedError):
                os.chmod(target, 0o700, follow_symlinks=False)
        func(failed)

    with contextlib.suppress(FileNotFoundError):
        shutil.rmtree(path, onerror=make_writable)


def clean_stale(base: Path) -> list[Path]:
    """Remove the sessions of processes that are gone (their lock is free)."""
    removed = []
    try:
        entries = list(os.scandir(base))
    except FileNotFoundError:
        return removed
    for entry in entries:
        if entry.name == "kept" or not entry.is_dir(follow_symlinks=False):
            continue
        path = Path(entry.path)
        try:
            fd = os.open(path / _LOCK, os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW)
        except FileNotFoundError:
            if time.time() - entry.stat(follow_symlinks=False).st_mtime > _UNLOCKED_GRACE_S:
                remove_tree(path)
                removed.append(path)
            continue
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise
            continue  # its owner is alive
        finally:
            os.close(fd)
        remove_tree(path)
        removed.append(path)
    return removed


class Session:
    """This process's folder of workspaces. `close()` removes it (kept runs excepted)."""

    def __init__(self, base: Path | None = None):
        self.base = base or default_base()
        _private_dir(self.base)
        clean_stale(self.base)
        self.path = self.base / f"{os.getpid()}-{secrets.token_hex(4)}"
        self.path.mkdir(mode=0o700)
        self._lock_fd = os.open(self.path / _LOCK, os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o600)
        fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        (self.path / "submissions").mkdir()
        self.closed = False

    @property
    def kept_dir(self) -> Path:
        return self.base / "kept"

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        remove_tree(self.path)
        os.close(self._lock_fd)


@dataclass(frozen=True)
class Workspace:
    run_dir: Path
    kept: bool

    @property
    def path(self) -> Path:
        return self.run_dir / "workspace"

    @property
    def script(self) -> Path:
        return self.path / SCRIPT_NAME


def create_workspace(
    session: Session,
    run_id: str,
    script: str,
    public_dir: Path | None,
    *,
    copy_input: bool,
    owner: tuple[int, int] | None,
    keep: bool,
) -> Workspace:
    """A fresh workspace. `copy_input`: without bwrap there is no read-only bind, so
    each run gets its own read-only copy (a hard link would let a script change
    the shared file). `owner`: the uid/gid the sandbox will run as."""
    parent = session.kept_dir if keep else session.path
    if keep:
        _private_dir(parent)
    ws = Workspace(run_dir=parent / run_id, kept=keep)
    ws.run_dir.mkdir(mode=0o700)
    ws.path.mkdir()
    for name in WORKSPACE_DIRS:
        if name == INPUT_DIR and copy_input and public_dir is not None:
            shutil.copytree(public_dir, ws.path / INPUT_DIR, symlinks=True)
            _make_read_only(ws.path / INPUT_DIR)
        else:
            (ws.path / name).mkdir()
    ws.script.write_text(script, encoding="utf-8")
    if owner is not None:
        uid, gid = owner
        for path in [ws.path, ws.script, *(ws.path / n for n in WORKSPACE_DIRS if n != INPUT_DIR)]:
            os.chown(path, uid, gid, follow_symlinks=False)
    return ws


def _make_read_only(root: Path) -> None:
    for dirpath, _dirnames, filenames in os.walk(root):
        for name in filenames:
            os.chmod(os.path.join(dirpath, name), 0o444, follow_symlinks=False)
        os.chmod(dirpath, 0o555)


def disk_usage(ws: Workspace, stop_at_files: int) -> tuple[int, int]:
    """(bytes on disk, entries) written in the workspace, input excepted.

    Counts allocated blocks, so sparse files count for what they really use. Stops
    counting at `stop_at_files` entries: a script making millions of files must
    not make each check take seconds.
    """
    total, entries = 0, 0
    stack = [str(ws.path)]
    while stack and entries < stop_at_files:
        try:
            scan = os.scandir(stack.pop())
        except OSError:
            continue
        with scan:
            for entry in scan:
                if entry.name == INPUT_DIR and os.path.dirname(entry.path) == str(ws.path):
                    continue
                entries += 1
                try:
                    info = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                total += info.st_blocks * 512
                if stat.S_ISDIR(info.st_mode):
                    stack.append(entry.path)
    return total, entries


def take_submission(ws: Workspace, dest_dir: Path) -> tuple[Path | None, str | None]:
    """Move the script's submission out of the workspace: (path, why it was refused).

    Only a regular file with one link counts: a symlink (or a `submission/` that is
    one) could point the grader, which reads as us, at the private answers. No
    sandboxed process is alive by now, so nothing can swap the file after the check.
    """
    try:
        dir_fd = os.open(ws.path / "submission", os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None, None
    except OSError:
        return None, "submission/ is not a plain directory (a symbolic link?); the submission was ignored"
    try:
        try:
            info = os.stat(SUBMISSION_NAME, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            return None, None
        if not stat.S_ISREG(info.st_mode):
            return None, "submission/submission.csv is not a regular file (a symbolic link?); it was ignored"
        if info.st_nlink != 1:
            return None, "submission/submission.csv is a hard link to another file; it was ignored"
        if ws.kept:
            return ws.path / "submission" / SUBMISSION_NAME, None
        dest = dest_dir / ws.run_dir.name / SUBMISSION_NAME
        dest.parent.mkdir(mode=0o700)
        os.rename(SUBMISSION_NAME, dest, src_dir_fd=dir_fd)
        os.chmod(dest, 0o600)
        return dest, None
    finally:
        os.close(dir_fd)


def hand_back(ws: Workspace) -> None:
    """Give a kept workspace back to us (it may belong to the run's uid); chown also
    clears any set-uid bit the script left there."""
    uid, gid = os.getuid(), os.getgid()
    for dirpath, dirnames, filenames in os.walk(ws.run_dir):
        for name in [*dirnames, *filenames]:
            os.chown(os.path.join(dirpath, name), uid, gid, follow_symlinks=False)
