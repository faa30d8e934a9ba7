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
import re
import secrets
import shutil
import stat
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from mleforge.errors import SandboxError

BASE_ENV = "MLEFORGE_SANDBOX_DIR"
SCRIPT_NAME = "script.py"
INPUT_DIR = "input"
WORKSPACE_DIRS = (INPUT_DIR, "working", "submission", "tmp")
SUBMISSION_NAME = "submission.csv"
_LOCK = ".lock"
_RUN_ID = re.compile(r"[0-9a-f]{16}")  # secrets.token_hex(8), as the executors name their runs
_UNLOCKED_GRACE_S = 600  # a session folder without a lock file may still be starting


def default_base() -> Path:
    override = os.environ.get(BASE_ENV)
    if override:
        return Path(override).expanduser().resolve()
    return Path(tempfile.gettempdir()) / f"mleforge-ws-{os.getuid()}"


def private_dir(path: Path) -> None:
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


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# Deeper than this, remove_tree moves a folder up to the top before going in: the
# descriptors held stay few however deep the tree is (past PATH_MAX too).
_REMOVE_DEPTH = 32


def remove_tree(path: Path) -> None:
    """Remove a folder a hostile script wrote, whatever it left in there: folders of mode
    0, without write or search permission, nested past PATH_MAX or deeper than any
    recursion. Relative to directory descriptors throughout (never a long path), each
    folder made ours (0700) before it is read; nothing is followed through a symlink."""
    try:
        info = os.lstat(path)
        if not stat.S_ISDIR(info.st_mode):
            os.unlink(path)
            return
        with contextlib.suppress(OSError):
            os.chmod(path, 0o700)
        top = os.open(path, _DIR_FLAGS)
    except FileNotFoundError:
        return
    try:
        moved = _empty(top, top)
        while moved:  # folders moved up from deep down: each is emptied the same way
            name = moved.pop()
            moved += _empty_child(top, name, top)
            os.rmdir(name, dir_fd=top)
    finally:
        os.close(top)
    with contextlib.suppress(FileNotFoundError):
        os.rmdir(path)


def _empty_child(parent: int, name: str, top: int) -> list[str]:
    with contextlib.suppress(OSError):
        os.chmod(name, 0o700, dir_fd=parent)  # a folder: not followed (lstat said so)
    fd = os.open(name, _DIR_FLAGS, dir_fd=parent)
    try:
        return _empty(fd, top)
    finally:
        os.close(fd)


def _empty(root: int, top: int) -> list[str]:
    """Remove everything below the folder `root`; folders found deeper than _REMOVE_DEPTH
    are moved into `top` instead (their new names are returned) and left for the caller."""
    moved: list[str] = []
    stack = [(root, iter(os.listdir(root)), None)]  # (fd, names left, its name in the parent)
    try:
        while stack:
            fd, names, own_name = stack[-1]
            name = next(names, None)
            if name is None:
                stack.pop()
                if stack:
                    os.close(fd)
                    with contextlib.suppress(FileNotFoundError):  # removed meanwhile (its run's own cleanup)
                        os.rmdir(own_name, dir_fd=stack[-1][0])
                continue
            try:
                info = os.stat(name, dir_fd=fd, follow_symlinks=False)
                if not stat.S_ISDIR(info.st_mode):
                    os.unlink(name, dir_fd=fd)
                elif len(stack) >= _REMOVE_DEPTH:
                    flat = f".mleforge-rm-{secrets.token_hex(8)}"
                    os.rename(name, flat, src_dir_fd=fd, dst_dir_fd=top)
                    moved.append(flat)
                else:
                    with contextlib.suppress(OSError):
                        os.chmod(name, 0o700, dir_fd=fd)
                    child = os.open(name, _DIR_FLAGS, dir_fd=fd)
                    try:
                        stack.append((child, iter(os.listdir(child)), name))
                    except BaseException:
                        os.close(child)
                        raise
            except FileNotFoundError:  # removed meanwhile
                continue
    finally:
        for fd, _, _ in stack[1:]:
            os.close(fd)
    return moved


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
        _end_runs_of(path)
        remove_tree(path)
        removed.append(path)
    return removed


def _end_runs_of(session: Path) -> None:
    """Kill what the runs of a dead process's session left running. A bwrap run's processes
    die with its pid namespace; an unisolated run's can outlive a parent killed outright
    (SIGKILL, or a Ray worker killed by force), and carry its run id (the folder's name)."""
    from mleforge.sandbox.process import sweep

    with contextlib.suppress(OSError):
        for entry in os.scandir(session):
            # Only a run's folder names a marker: the session also holds folders of fixed names
            # (submissions, the pool's zygotes) that any unrelated process may carry.
            if entry.is_dir(follow_symlinks=False) and _RUN_ID.fullmatch(entry.name):
                sweep(entry.name.encode())


class Session:
    """This process's folder of workspaces. `close()` removes it (kept runs excepted)."""

    def __init__(self, base: Path | None = None):
        self.base = base or default_base()
        private_dir(self.base)
        clean_stale(self.base)
        self.path = self.base / f"{os.getpid()}-{secrets.token_hex(4)}"
        self.path.mkdir(mode=0o700)
        # Locked before it takes its name: another process's clean_stale never finds the
        # lock of a live session free (a missing lock falls under the grace period).
        pending = self.path / (_LOCK + ".new")
        self._lock_fd = os.open(pending, os.O_CREAT | os.O_EXCL | os.O_RDWR | os.O_CLOEXEC, 0o600)
        fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.rename(pending, self.path / _LOCK)
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
        private_dir(parent)
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


# Folders nested deeper than this count as over the disk limit: the walk holds one
# descriptor per level, and no honest script nests its workspace so deep.
DISK_DEPTH = 64


def disk_usage(ws: Workspace, stop_at_files: int) -> tuple[int, int, str | None]:
    """(bytes on disk, entries, why the count cannot be trusted) of what the run wrote in
    its workspace, input excepted.

    Counts allocated blocks, so sparse files count for what they really use. Walks by
    directory descriptors (a path past PATH_MAX is no escape); a folder it cannot read
    (mode 0) or nested deeper than DISK_DEPTH could hide any amount, so it is reported
    as the third item, which the executors treat as over the limit. Stops counting at
    `stop_at_files` entries: a script making millions of files must not make each
    check take seconds.
    """
    total, entries = 0, 0
    try:
        top = os.open(ws.path, _DIR_FLAGS)
    except OSError as exc:
        return 0, 0, f"the workspace cannot be read ({exc.strerror})"
    # Depth first, one open folder (descriptor and listing) per level.
    stack: list[tuple[int, Iterator[os.DirEntry]]] = []
    try:
        stack.append((top, os.scandir(top)))
        while stack and entries < stop_at_files:
            fd, scan = stack[-1]
            entry = next(scan, None)
            if entry is None:
                stack.pop()
                scan.close()
                os.close(fd)
                continue
            if fd == top and entry.name == INPUT_DIR:
                continue
            entries += 1
            try:
                info = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            total += info.st_blocks * 512
            if not stat.S_ISDIR(info.st_mode):
                continue
            if len(stack) >= DISK_DEPTH:
                return total, entries, f"folders nested deeper than {DISK_DEPTH} levels"
            try:
                child = os.open(entry.name, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                continue
            try:
                stack.append((child, os.scandir(child)))
            except BaseException:
                os.close(child)
                raise
    except OSError as exc:
        return total, entries, f"a folder of the workspace cannot be read ({exc.strerror})"
    finally:
        for fd, scan in stack:
            scan.close()
            os.close(fd)
    return total, entries, None


def take_submission(ws: Workspace, dest_dir: Path) -> tuple[Path | None, str | None]:
    """Move the script's submission out of the workspace: (path, why it was refused).

    Only a regular file with one link counts: a symlink (or a `submission/` that is
    one) could point the grader, which reads as us, at the private answers. No
    sandboxed process is alive by now, so nothing can swap the file after the check.
    A `submission/` the script made unreadable or unwritable (chmod 0500, 0) is made
    ours again first; what still cannot be moved is a refused submission with its
    reason, never an exception out of the run.
    """
    folder = ws.path / "submission"
    try:
        info = os.lstat(folder)
    except FileNotFoundError:
        return None, None
    except OSError as exc:
        return None, _unmovable(exc)
    if not stat.S_ISDIR(info.st_mode):
        return None, "submission/ is not a plain directory (a symbolic link?); the submission was ignored"
    if info.st_mode & 0o700 != 0o700:
        with contextlib.suppress(OSError):
            os.chmod(folder, 0o700)  # a real folder (lstat): nothing is followed
    try:
        dir_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None, None
    except OSError:
        return None, "submission/ is not a plain directory (a symbolic link?); the submission was ignored"
    try:
        return _move_submission(ws, dir_fd, dest_dir)
    except OSError as exc:
        return None, _unmovable(exc)
    finally:
        os.close(dir_fd)


def _unmovable(exc: OSError) -> str:
    return (f"submission/submission.csv could not be taken out of the workspace "
            f"({type(exc).__name__}: {exc.strerror or exc}); leave submission/ readable and writable")


def _move_submission(ws: Workspace, dir_fd: int, dest_dir: Path) -> tuple[Path | None, str | None]:
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


def hand_back(ws: Workspace) -> None:
    """Give a kept workspace back to us (it may belong to the run's uid); chown also
    clears any set-uid bit the script left there."""
    uid, gid = os.getuid(), os.getgid()
    for dirpath, dirnames, filenames in os.walk(ws.run_dir):
        for name in [*dirnames, *filenames]:
            os.chown(os.path.join(dirpath, name), uid, gid, follow_symlinks=False)
