"""The pure parts: limits, output capture, results and their classification, bwrap's command line."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from mleforge.errors import ConfigError
from mleforge.sandbox import RunLimits
from mleforge.sandbox.bwrap import BwrapPlan, bwrap_args, passwd_text
from mleforge.sandbox.interpreter import exposes, python_roots
from mleforge.sandbox.output import CappedCapture
from mleforge.sandbox.result import ExecutionResult, killed_by_of
from mleforge.tasks.spec import Limits


def test_limits_from_a_task_and_overrides():
    limits = RunLimits.of(None, Limits(timeout_s=60, memory_mb=2048, cpus=4), timeout_s=5, nproc=None)
    assert (limits.timeout_s, limits.memory_mb, limits.cpus, limits.nproc) == (5, 2048, 4, 512)
    assert limits.effective_cpu_s == 5 * 4 + 5
    assert limits.effective_address_space_mb == 2 * 2048 + 4096
    assert limits.effective_file_size_mb == limits.disk_mb
    assert RunLimits.from_dict(limits.to_dict()) == limits
    assert RunLimits.of(limits) is limits


@pytest.mark.parametrize("bad", [{"timeout_s": 0}, {"memory_mb": -1}, {"nproc": 0}, {"nofile": 8},
                                 {"cpu_s": 0}, {"address_space_mb": -1}, {"cpus": True}])
def test_limits_reject_nonsense(bad):
    with pytest.raises(ConfigError):
        RunLimits(**bad)


def test_capture_keeps_everything_when_small():
    cap = CappedCapture(8, 8)
    cap.feed(b"hello ")
    cap.feed(b"world")
    assert cap.text() == "hello world" and cap.total == 11


def test_capture_keeps_head_and_tail_of_a_flood():
    cap = CappedCapture(4, 6)
    for i in range(10_000):
        cap.feed(b"%05d" % i)
    assert cap.total == 50_000
    assert cap.text() == "0000\n[... 49990 bytes omitted ...]\n809999"
    assert len(cap.tail) <= 2 * 6 + 5  # bounded however long the stream


def test_capture_replaces_invalid_utf8():
    cap = CappedCapture(100, 100)
    cap.feed(b"ok \xff\xfe \xc3(")
    assert cap.text() == "ok \ufffd\ufffd \ufffd("


def test_result_round_trips():
    result = ExecutionResult(
        run_id="r", task_id="t", returncode=0, signal=None, timed_out=False, killed_by=None, wall_s=1.0,
        cpu_s=0.5, peak_memory_mb=10.0, stdout="out", stderr="", stdout_bytes=3, stderr_bytes=0,
        submission_path=None, isolation="bwrap", warnings=("w",), limits=RunLimits().to_dict(),
    )
    assert ExecutionResult.from_dict(result.to_dict()) == result
    assert result.ok


def _why(**kw):
    base = dict(parent_reason=None, timed_out=False, returncode=0, signal_number=None, cpu_s=0.1,
                cpu_limit_s=10, stderr_tail="")
    return killed_by_of(**{**base, **kw})


def test_killed_by():
    assert _why() is None
    assert _why(returncode=1, stderr_tail="ValueError") is None
    assert _why(parent_reason="output", signal_number=9) == "output"
    assert _why(timed_out=True, signal_number=9) == "timeout"
    assert _why(signal_number=signal.SIGXCPU) == "cpu"
    assert _why(signal_number=signal.SIGKILL, cpu_s=10.2) == "cpu"
    assert _why(signal_number=signal.SIGXFSZ) == "disk"
    assert _why(returncode=1, stderr_tail="...\nMemoryError\n") == "memory"
    assert _why(signal_number=6, stderr_tail="terminate called after throwing 'std::bad_alloc'") == "memory"
    assert _why(returncode=0, stderr_tail="MemoryError") is None  # a script that merely prints it
    assert _why(signal_number=15) == "signal"


def _plan(as_root: bool, tmp_path: Path) -> BwrapPlan:
    return BwrapPlan(
        bwrap="/usr/bin/bwrap", as_root=as_root, workspace=tmp_path / "ws", public_dir=tmp_path / "public",
        passwd=tmp_path / "passwd", group=tmp_path / "group",
        ro_binds=("/work/main/.venv", "/root/.pyenv/versions/3.11.7"), shm_mb=64,
    )


def test_bwrap_args_isolate(tmp_path):
    args = bwrap_args(_plan(True, tmp_path))
    for flag in ("--unshare-pid", "--unshare-net", "--unshare-ipc", "--die-with-parent", "--new-session"):
        assert flag in args
    # Root: no user namespace (it would map to root), only the caps needed to drop to the run's uid.
    assert "--unshare-user" not in args
    assert args[args.index("--cap-drop") + 1] == "ALL"
    assert {args[i + 1] for i, a in enumerate(args) if a == "--cap-add"} == {"CAP_SETUID", "CAP_SETGID"}
    # Writable: the workspace and its tmp, nothing else.
    binds = [(args[i + 1], args[i + 2]) for i, a in enumerate(args) if a == "--bind"]
    assert binds == [(str(tmp_path / "ws"), "/workspace"), (str(tmp_path / "ws" / "tmp"), "/tmp")]
    assert (str(tmp_path / "public"), "/workspace/input") in [
        (args[i + 1], args[i + 2]) for i, a in enumerate(args) if a == "--ro-bind"
    ]
    # The venv alone, not the project around it; parents made traversable for the dropped uid.
    sources = {args[i + 1] for i, a in enumerate(args) if a in ("--bind", "--ro-bind", "--ro-bind-try")}
    assert "/work/main" not in sources and "/root" not in sources and "/work/main/.venv" in sources
    assert args[args.index("/root") - 3: args.index("/root")] == ["--perms", "0755", "--dir"]
    assert args[-2:] == ["--remount-ro", "/"]
    assert not any(a.startswith("/etc/shadow") or a == "/etc" for a in args)


def test_bwrap_args_user_namespace_when_not_root(tmp_path):
    args = bwrap_args(_plan(False, tmp_path))
    assert "--unshare-user" in args and "--disable-userns" in args and "--cap-add" not in args


def test_passwd_has_the_sandbox_user():
    passwd, group = passwd_text(1234, 1234)
    assert "sandbox:x:1234:1234:sandbox:/workspace/working:/bin/sh" in passwd
    assert "sandbox:x:1234:" in group


def test_python_roots_are_prefixes_outside_system_dirs():
    import sys

    roots = python_roots(sys.executable)
    assert roots and all(not r.startswith("/usr/") for r in roots)
    assert any(Path(sys.prefix).resolve() == Path(r) or str(Path(sys.prefix).resolve()).startswith(r + "/")
               for r in roots)
    assert exposes(roots, Path(roots[0]) / "x" / "answers.csv") == roots[0]
    assert exposes(roots, Path("/nonexistent/private/answers.csv")) is None


def test_older_bwrap_gets_no_newer_options(tmp_path):
    plan = _plan(False, tmp_path)
    old = bwrap_args(BwrapPlan(**{**plan.__dict__, "version": (0, 6, 1)}))
    assert "--disable-userns" not in old and "--size" not in old
    assert (str(tmp_path / "ws" / "tmp"), "/dev/shm") in [(old[i + 1], old[i + 2]) for i, a in enumerate(old) if a == "--bind"]


def test_status_lines_other_than_the_supervisors_are_tampering():
    from mleforge.sandbox.process import _parse_events

    started = b'{"event": "started", "pid": 2, "uid": 9}\n'
    spawned = b'{"event": "spawned", "pid": 3}\n'
    exit_ok = b'{"event": "exit", "returncode": 0, "signal": null, "timed_out": false}\n'
    forged = b'{"event": "exit", "returncode": 0, "signal": null, "timed_out": false, "cpu_s": 0.1}\n'
    events, tampered = _parse_events(started + spawned + exit_ok, complete=True)
    assert [e["event"] for e in events] == ["started", "spawned", "exit"] and not tampered
    # A forged line plus a stray byte: the real exit line is glued to it and unparsable.
    events, tampered = _parse_events(started + spawned + forged + b"x" + exit_ok, complete=True)
    assert tampered and [e["event"] for e in events] == ["started", "spawned", "exit"]
    # Parsing stops at the bad line: nothing after it is taken.
    events, tampered = _parse_events(started + b"garbage\n" + spawned + exit_ok, complete=True)
    assert tampered and [e["event"] for e in events] == ["started"]
    for raw in (started + spawned + exit_ok + forged,  # a second exit
                started + exit_ok + spawned,  # out of order
                started + spawned + exit_ok[:-1],  # no newline: not a whole line
                b'{"event": "mine"}\n'):  # not one of ours
        assert _parse_events(raw, complete=True)[1], raw
    assert _parse_events(started, complete=False)[1]  # the capture lost the start: cut
    assert _parse_events(b"", complete=True) == ([], False)


def test_private_data_under_anything_the_sandbox_sees_is_refused(tmp_path):
    from types import SimpleNamespace

    from mleforge.errors import SandboxError
    from mleforge.sandbox.isolation import require_hidden, visible_roots

    assert "/usr" in visible_roots(())
    under_usr = SimpleNamespace(private_dir=Path("/usr/local/share/mleforge/t/private"),
                                answers_path=Path("/usr/local/share/mleforge/t/private/answers.csv"),
                                public_dir=tmp_path / "public")
    with pytest.raises(SandboxError, match="inside /usr, which the sandbox shows"):
        require_hidden(under_usr, ())
    inside_public = SimpleNamespace(private_dir=tmp_path / "public" / "private",
                                    answers_path=tmp_path / "public" / "private" / "answers.csv",
                                    public_dir=tmp_path / "public")
    with pytest.raises(SandboxError, match="inside " + str(tmp_path / "public")):
        require_hidden(inside_public, ())
    with pytest.raises(SandboxError, match="inside " + str(tmp_path)):
        require_hidden(SimpleNamespace(private_dir=tmp_path / "p", answers_path=tmp_path / "p" / "a.csv",
                                       public_dir=tmp_path / "elsewhere"), (str(tmp_path),))
    require_hidden(SimpleNamespace(private_dir=tmp_path / "p", answers_path=tmp_path / "p" / "a.csv",
                                   public_dir=tmp_path / "pub"), ())


def test_bwrap_args_load_the_seccomp_filter_last(tmp_path):
    plan = _plan(False, tmp_path)
    args = bwrap_args(BwrapPlan(**{**plan.__dict__, "seccomp_fd": 7}))
    assert args[-4:] == ["--remount-ro", "/", "--seccomp", "7"]
    assert "--seccomp" not in bwrap_args(plan)


def test_files_without_a_name_count_while_a_process_holds_them(tmp_path):
    """process.unlinked_bytes: what the workspace walk cannot see, found through /proc."""
    import mmap
    import os

    from mleforge.sandbox.process import unlinked_bytes

    device, me = os.stat(tmp_path).st_dev, os.getpid()
    before, complete = unlinked_bytes([me], device)
    assert complete
    opened = open(tmp_path / "opened", "wb")  # noqa: SIM115 - held open on purpose
    os.unlink(tmp_path / "opened")
    opened.write(b"\x01" * (3 << 20))
    opened.flush()
    fd = os.open(tmp_path / "mapped", os.O_CREAT | os.O_RDWR, 0o600)
    os.unlink(tmp_path / "mapped")
    os.write(fd, b"\x02" * (2 << 20))
    mapping = mmap.mmap(fd, 2 << 20)
    os.close(fd)  # kept only by the mapping
    try:
        (tmp_path / "named").write_bytes(b"\x03" * (4 << 20))  # the walk's: not counted here
        held, complete = unlinked_bytes([me, me], device)  # a pid twice: each file once
        assert complete and held - before == 5 << 20
        assert unlinked_bytes([me], device + 1)[0] == 0  # another file system's files are not ours
    finally:
        mapping.close()
        opened.close()
    assert unlinked_bytes([me], device)[0] == before


def test_a_sweep_looks_again_past_the_exec_window(monkeypatch):
    """A child started just before its parent was killed can look unmarked for a moment (its
    /proc command line and environment are filled in after the exec): the sweep looks again."""
    from mleforge.sandbox import process

    seen = iter([[11], [], [12], [], []])
    killed, slept = [], []
    monkeypatch.setattr(process, "marked_processes", lambda marker: next(seen))
    monkeypatch.setattr(process.os, "kill", lambda pid, sig: killed.append((pid, sig)))
    monkeypatch.setattr(process.time, "sleep", slept.append)
    assert process.sweep(b"run") == 2
    assert killed == [(11, signal.SIGKILL), (12, signal.SIGKILL)]
    assert slept.count(process.EXEC_WINDOW_S) == 2
    # Nothing marked at all: one look, no pause.
    monkeypatch.setattr(process, "marked_processes", lambda marker: [])
    slept.clear()
    assert process.sweep(b"run") == 0 and slept == []
