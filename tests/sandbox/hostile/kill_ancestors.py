# why: SIGKILL every ancestor up the process tree (the executor itself, were it visible)
# expect: killed_by=signal max_wall_s=5
# limits: timeout_s=20
# requires: bwrap
import os
import signal
import sys
import time

# Belt and braces: never run this outside the sandbox's pid namespace, whose pid 1 is
# bwrap (local executor) or the warm pool's run init.
with open("/proc/1/cmdline", "rb") as f:
    cmdline = f.read()
    init = os.path.basename(cmdline.split(b"\0")[0])
    if (init != b"bwrap" and b"\0mleforge-run-init\0" not in cmdline) or os.uname().nodename != "sandbox":
        print("refusing: not inside the bwrap sandbox")
        sys.exit(3)
pid = os.getppid()
while pid > 1:
    with open(f"/proc/{pid}/stat") as f:
        parent = int(f.read().rsplit(")", 1)[1].split()[1])
    print("killing", pid, flush=True)
    os.kill(pid, signal.SIGKILL)
    pid = parent
for target in (1, -1):
    try:
        os.kill(target, signal.SIGKILL)
    except OSError as exc:
        print("BLOCKED kill", target, type(exc).__name__)
time.sleep(30)
