"""Workspaces: layout, submissions taken out safely, cleanup after us and after dead processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from mleforge.errors import SandboxError
from mleforge.sandbox.workspace import (
    Session,
    clean_stale,
    create_workspace,
    disk_usage,
    remove_tree,
    take_submission,
)


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
    used, entries = disk_usage(ws, 1000)
    assert (1 << 20) <= used < (2 << 20)
    assert entries == 6  # script.py, working/, blob, sparse, submission/, tmp/; input/ is not counted


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
