"""The supervisor's lifeline: an executor that dies without its death signal reaching the
sandbox (bwrap asks for --die-with-parent only after its clone, so an executor killed in
between leaves an orphan nothing signals) still takes the run with it, because the
supervisor sees that nothing reads its status pipe any more."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from mleforge.sandbox.interpreter import supervisor_command
from tests.waiting import wait_for

SCRIPT = """\
import os, sys, time
if os.fork() == 0:
    os.setsid()                       # a grandchild that leaves the script's group
    with open(sys.argv[0] + ".pids", "a") as f:
        f.write(f"{os.getpid()}\\n")
    time.sleep(120)
    os._exit(0)
with open(sys.argv[0] + ".pids", "a") as f:
    f.write(f"{os.getpid()}\\n")
time.sleep(120)
"""


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_a_supervisor_whose_status_pipe_nobody_reads_kills_the_run_and_exits(tmp_path):
    script = tmp_path / "script.py"
    script.write_text(SCRIPT)
    read, write = os.pipe()
    # No death signal asked for: as inside bwrap, where --die-with-parent is to do that job.
    config = {"script": str(script), "status_fd": write, "timeout_s": 300, "rlimits": [], "nproc": None,
              "subreaper": True, "pdeathsig": False}
    command = supervisor_command(sys.executable, "lifeline-test", config)
    proc = subprocess.Popen(command, pass_fds=(write,), cwd=tmp_path)
    os.close(write)
    try:
        pids_file = tmp_path / "script.py.pids"
        assert wait_for(lambda: pids_file.is_file() and len(pids_file.read_text().split()) == 2)
        pids = [int(p) for p in pids_file.read_text().split()]
        assert all(alive(p) for p in pids)
        started = time.monotonic()
        os.close(read)  # the executor is gone
        proc.wait(timeout=30)
        assert proc.returncode == 1
        assert time.monotonic() - started < 30  # checked twice a second, far from the 300 s timeout
        assert wait_for(lambda: not any(alive(p) for p in pids)), [p for p in pids if alive(p)]
    finally:
        proc.kill()
        proc.wait()


def test_a_supervisor_read_to_the_end_exits_cleanly_with_its_lines(tmp_path):
    script = tmp_path / "script.py"
    script.write_text("import time\ntime.sleep(1.2)\nprint('done')\n")  # past two lifeline checks
    read, write = os.pipe()
    config = {"script": str(script), "status_fd": write, "timeout_s": 30, "rlimits": [], "nproc": None,
              "subreaper": True, "pdeathsig": False}
    proc = subprocess.run(supervisor_command(sys.executable, "lifeline-test", config), pass_fds=(write,),
                          cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False)
    os.close(write)
    with os.fdopen(read, "rb") as f:
        lines = f.read().decode().splitlines()
    assert proc.returncode == 0 and proc.stdout == "done\n"
    assert [line.split('"event": "')[1].split('"')[0] for line in lines] == ["started", "spawned", "exit"]
    assert '"returncode": 0' in lines[-1] and '"timed_out": false' in lines[-1]
