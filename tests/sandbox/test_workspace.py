"""Workspaces: layout, submissions taken out safely, cleanup after us and after dead processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from mleforge.errors import SandboxError
from mleforge.sandbox.process import marked_processes, sweep
from mleforge.sandbox.workspace import (
    Session,
    clean_stale,
    create_workspace,
    disk_usage,
    remove_tree,
    take_submission,
)
from tests.waiting import wait_for


@pytest.fixture
def session(tmp_path):
    s = Session(tmp_path / "base")
    yield s
    s.close()


def _public(tmp_path):
    public = tmp_path / "public"
    public.mkdir()
    (public / "train.csv").write_text("a,b\n1,2\n")
    return public


def test_layout_and_read_only_copy(session, tmp_path):
    ws = create_workspace(session, "r1", "print(1)", _public(tmp_path), copy_input=True, owner=None, keep=False)
    assert sorted(p.name for p in ws.path.iterdir()) == ["input", "script.py", "submission", "tmp", "working"]
    assert ws.script.read_text() == "print(1)"
    assert (ws.path / "input" / "train.csv").stat().st_mode & 0o777 == 0o444
    remove_tree(ws.run_dir)
    assert not ws.run_dir.exists()


def test_submission_is_moved_out(session, tmp_path):
    ws = create_workspace(session, "r2", "", None, copy_input=False, owner=None, keep=False)
    (ws.path / "submission" / "submission.csv").write_text("id,y\n1,2\n")
    path, refused = take_submission(ws, session.path / "submissions")
    assert refused is None and path.read_text() == "id,y\n1,2\n"
    assert not path.is_relative_to(ws.run_dir)


def test_symlinks_and_hard_links_are_refused(session, tmp_path):
    secret = tmp_path / "answers.csv"
    secret.write_text("id,y\n1,42\n")
    ws = create_workspace(session, "r3", "", None, copy_input=False, owner=None, keep=False)
    link = ws.path / "submission" / "submission.csv"
    link.symlink_to(secret)
    assert take_submission(ws, session.path / "submissions")[0] is None
    link.unlink()
    os.link(secret, link)
    path, refused = take_submission(ws, session.path / "submissions")
    assert path is None and "hard link" in refused
    link.unlink()
    (ws.path / "submission").rmdir()
    (ws.path / "submission").symlink_to(tmp_path)
    (tmp_path / "submission.csv").write_text("id,y\n")
    path, refused = take_submission(ws, session.path / "submissions")
    assert path is None and "not a plain directory" in refused


def test_remove_tree_survives_hostile_modes(tmp_path):
    root = tmp_path / "run"
    (root / "a" / "b").mkdir(parents=True)
    (root / "a" / "b" / "f").write_text("x")
    os.chmod(root / "a" / "b", 0)
    os.chmod(root / "a", 0o500)
    remove_tree(root)
    assert not root.exists()


def test_disk_usage_counts_blocks_not_input(session, tmp_path):
    ws = create_workspace(session, "r4", "", _public(tmp_path), copy_input=True, owner=None, keep=False)
    (ws.path / "working" / "blob").write_bytes(os.urandom(1 << 20))
    with open(ws.path / "working" / "sparse", "wb") as f:
        f.truncate(1 << 30)  # a gigabyte that uses no disk
    used, entries, uncountable = disk_usage(ws, 1000)
    assert (1 << 20) <= used < (2 << 20) and uncountable is None
    assert entries == 6  # script.py, working/, blob, sparse, submission/, tmp/; input/ is not counted


def _nest(folder, depth: int, name: str = "d" * 200) -> None:
    """`depth` folders one in another below `folder` (past PATH_MAX for depth > 20), a file at the bottom."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(depth):
        os.mkdir(name, dir_fd=fd)
        inner = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = inner
    with open(os.open("bottom", os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=fd), "wb") as f:
        f.write(b"x" * 4096)
    os.fchmod(fd, 0)
    os.close(fd)


def test_disk_usage_cannot_be_escaped_by_depth_or_modes(session, tmp_path):
    ws = create_workspace(session, "r5", "", None, copy_input=False, owner=None, keep=False)
    _nest(ws.path / "working", 40)  # 8 kB of names per path: past PATH_MAX, within DISK_DEPTH
    used, entries, uncountable = disk_usage(ws, 10_000)
    assert uncountable is None or os.geteuid() != 0  # as root, mode 0 hides nothing
    _nest(ws.path / "tmp", 80)
    used, entries, uncountable = disk_usage(ws, 10_000)
    assert uncountable is not None and ("deeper than 64" in uncountable or "cannot be read" in uncountable)
    if os.geteuid() != 0:  # a folder we may not read could hide anything: counted as over
        hidden = ws.path / "submission" / "hidden"
        hidden.mkdir()
        os.chmod(hidden, 0)
        assert "cannot be read" in disk_usage(ws, 10_000)[2]


def test_remove_tree_survives_any_mode_and_depth(tmp_path):
    root = tmp_path / "left"
    root.mkdir()
    _nest(root, 300)  # deeper than the descriptors remove_tree holds, past PATH_MAX
    (root / "a" / "b").mkdir(parents=True)
    (root / "a" / "b" / "f").write_text("x")
    os.chmod(root / "a" / "b", 0)
    os.chmod(root / "a", 0o500)
    os.symlink("/etc/passwd", root / "a-link")
    os.mkfifo(root / "fifo")
    os.chmod(root, 0o500)
    remove_tree(root)
    assert not root.exists() and os.path.exists("/etc/passwd")


def test_base_must_be_ours_and_real(tmp_path):
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "base").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(SandboxError):
        Session(tmp_path / "base")


def test_stale_sessions_of_dead_processes_are_removed(tmp_path):
    base = tmp_path / "base"
    code = textwrap.dedent(f"""
        import time
        from pathlib import Path
        from mleforge.sandbox.workspace import Session
        s = Session(Path({str(base)!r}))
        print(s.path, flush=True)
        time.sleep(60)
    """)
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        dead_path = child.stdout.readline().strip()
        live = Session(base)  # the child is alive: its session stays
        assert os.path.isdir(dead_path)
        child.send_signal(signal.SIGKILL)
        child.wait()
        assert clean_stale(base) == [type(live.path)(dead_path)]
        assert not os.path.exists(dead_path) and live.path.is_dir()
        live.close()
        assert not live.path.exists()
    finally:
        child.kill()
        child.stdout.close()


def test_a_stale_sessions_runs_leave_no_process_behind(tmp_path):
    """A parent killed outright leaves an unisolated run's processes running; they carry the
    run id (the run folder's name) and die when the stale session is cleaned."""
    base = tmp_path / "base"
    run_id = "ab12" + os.urandom(6).hex()
    (tmp_path / "run_id").write_text(run_id)  # not in the parent's command line: only the run carries it
    code = textwrap.dedent(f"""
        import os, subprocess, sys, time
        from pathlib import Path
        from mleforge.sandbox.workspace import Session
        s = Session(Path({str(base)!r}))
        run_id = Path({str(tmp_path / "run_id")!r}).read_text()
        (s.path / run_id).mkdir()
        env = {{**os.environ, "MLEFORGE_RUN_ID": run_id}}
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env=env, start_new_session=True)
        print(s.path, flush=True)
        time.sleep(60)
    """)
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        dead_path = parent.stdout.readline().strip()
        # The run's process. Popen returns once the exec is past its point of no return, a moment
        # before the kernel has set up the new command line and environment that /proc shows:
        # on a loaded machine the first look can find neither.
        assert wait_for(lambda: len(marked_processes(run_id.encode())) == 1)
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        assert marked_processes(run_id.encode())  # outlives its parent
        assert clean_stale(base) == [Path(dead_path)]
        assert wait_for(lambda: not marked_processes(run_id.encode()))
    finally:
        parent.kill()
        sweep(run_id.encode())


def test_a_stale_sessions_fixed_folders_kill_nothing(tmp_path):
    """A dead session also holds folders of fixed names (submissions, the pool's zygotes):
    they are no run ids, and an unrelated process whose command line carries them lives on."""
    base = tmp_path / "base"
    base.mkdir(mode=0o700)
    dead = base / "1-deadbeef"
    dead.mkdir()
    (dead / ".lock").touch()  # nobody holds it: its owner is gone
    for name in ("zygotes", "submissions", "not-a-run"):
        (dead / name).mkdir()
    bystander = subprocess.Popen([sys.executable, "-c", "import time, sys; time.sleep(60)", "zygotes", "not-a-run"])
    try:
        assert clean_stale(base) == [dead]
        time.sleep(0.2)
        assert bystander.poll() is None  # still running
    finally:
        bystander.kill()
        bystander.wait()


def test_a_live_sessions_lock_is_held_under_its_name(tmp_path):
    """The lock is taken before it is named .lock: no other process can find it free."""
    s = Session(tmp_path / "base")
    try:
        assert sorted(p.name for p in s.path.iterdir()) == [".lock", "submissions"]
        assert clean_stale(tmp_path / "base") == [] and s.path.is_dir()
    finally:
        s.close()
