"""The script's Landlock domain (supervisor._landlock_scope): each run's record says
whether the script really entered it, not only whether the kernel has Landlock."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from mleforge.sandbox import RunLimits, seccomp
from mleforge.sandbox.interpreter import supervisor_command
from mleforge.sandbox.isolation import Isolation, landlock_of_run
from mleforge.sandbox.launch import result_of
from mleforge.sandbox.local import LocalExecutor
from mleforge.sandbox.output import CappedCapture
from mleforge.sandbox.pool.executor import PoolExecutor
from mleforge.sandbox.process import Watched, _parse_events
from tests.sandbox.conftest import run_once_isolated

ON = "/proc of processes outside the script denied (ABI 7)"
E2BIG = "landlock_restrict_self failed: E2BIG (Argument list too long)"
# The kernel's LANDLOCK_MAX_NUM_LAYERS: a process in this many domains cannot enter another.
MAX_LAYERS = 16


def _landlock_here() -> bool:
    return not seccomp.landlock_status().startswith("off")


def test_the_run_record_is_the_executors_unless_the_domain_was_not_entered():
    assert landlock_of_run(ON, None) == ON
    assert landlock_of_run(None, None) is None  # no bwrap: no domain asked for
    assert landlock_of_run(ON, E2BIG) == f"off (not applied in this run: {E2BIG})"
    off = "off (no Landlock here: Function not implemented)"
    assert landlock_of_run(off, "landlock_create_ruleset failed: ENOSYS (Function not implemented)") == (
        "off (not applied in this run: landlock_create_ruleset failed: ENOSYS (Function not implemented))"
    )


def _watched(exit_event: dict) -> Watched:
    events = [{"event": "started", "pid": 2, "uid": 1000}, {"event": "spawned", "pid": 3}, exit_event]
    return Watched(stdout=CappedCapture(100, 100), stderr=CappedCapture(100, 100), events=events,
                   reason=None, exit_code=0, wall_s=0.1)


@pytest.mark.parametrize(("recorded", "not_entered", "expected", "warns"), [
    (ON, None, ON, False),
    (ON, E2BIG, f"off (not applied in this run: {E2BIG})", True),
    # The executor's record already says off (no Landlock in this kernel): nothing new to warn of.
    ("off (no Landlock here: Function not implemented)", "landlock_create_ruleset failed: ENOSYS (x)",
     "off (not applied in this run: landlock_create_ruleset failed: ENOSYS (x))", False),
])
def test_the_supervisors_exit_line_sets_the_results_landlock(tmp_path, recorded, not_entered, expected, warns):
    isolation = Isolation("bwrap", "/usr/bin/bwrap", False, bwrap_version="0.11.0", bwrap_source="system",
                          seccomp="ptrace denied", landlock=recorded)
    exit_event = {"event": "exit", "returncode": 0, "signal": None, "timed_out": False, "cpu_s": 0.01,
                  "maxrss_kb": 9000, "landlock_off": not_entered}
    result = result_of("r1", "t", "print(1)", RunLimits(), isolation, _watched(exit_event), None, None, 0.0, None)
    assert result.ok and result.landlock == expected
    landlock_warnings = [w for w in result.warnings if "Landlock domain" in w]
    assert landlock_warnings == ([f"the script ran outside its Landlock domain ({not_entered}): /proc/<pid>/mem "
                                  "of processes outside the script was open to it (the seccomp filter still "
                                  "denied ptrace)"] if warns else [])


# Started MAX_LAYERS domains deep, the supervisor's child cannot enter one more: a real
# failure of landlock_restrict_self, which the supervisor must report on its exit line.
NESTED_START = textwrap.dedent("""
    import os, sys
    from mleforge.sandbox import supervisor
    for _ in range(int(sys.argv[1])):
        why = supervisor._landlock_scope()
        if why is not None:
            sys.exit("could not nest: " + why)
    os.execv(sys.argv[2], sys.argv[2:])
""")


def _supervise(tmp_path, layers: int) -> tuple[list[dict], bool, str]:
    script = tmp_path / "script.py"
    script.write_text("print('ran')\n")
    read, write = os.pipe()
    config = {"script": str(script), "status_fd": write, "timeout_s": 30, "rlimits": [], "nproc": None,
              "subreaper": True, "landlock": True}
    command = supervisor_command(sys.executable, "landlock-test", config)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    try:
        proc = subprocess.run([sys.executable, "-c", NESTED_START, str(layers), *command], pass_fds=(write,),
                              capture_output=True, text=True, timeout=60, env=env, check=False)
    finally:
        os.close(write)
    with os.fdopen(read, "rb") as f:
        events, tampered = _parse_events(f.read(), complete=True)
    assert proc.returncode == 0, proc.stderr
    return events, tampered, proc.stdout


@pytest.mark.skipif(not _landlock_here(), reason="no Landlock in this kernel")
def test_the_supervisor_reports_a_domain_it_could_not_enter(tmp_path):
    events, tampered, stdout = _supervise(tmp_path, MAX_LAYERS)
    assert not tampered and [e["event"] for e in events] == ["started", "spawned", "exit"]
    assert events[-1]["landlock_off"] == E2BIG
    assert events[-1]["returncode"] == 0 and stdout == "ran\n"  # Landlock missing never fails the run
    events, tampered, stdout = _supervise(tmp_path, 0)
    assert not tampered and events[-1]["landlock_off"] is None and stdout == "ran\n"


@pytest.mark.skipif(not _landlock_here(), reason="no Landlock in this kernel")
@pytest.mark.parametrize("cls", [LocalExecutor, PoolExecutor])
def test_a_sandboxed_run_records_its_domain_as_on(cls, canary, tmp_path):
    isolation, result = run_once_isolated(cls, canary, tmp_path)
    assert result.ok
    assert result.landlock == isolation.landlock == isolation.to_dict()["landlock"] == seccomp.landlock_status()
    assert not any("Landlock" in w for w in result.warnings)
