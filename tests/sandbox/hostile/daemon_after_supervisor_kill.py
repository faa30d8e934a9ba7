# why: start a classic daemon (double fork, setsid, closed stdio, execve with an empty environment, so no run marker), then SIGKILL the supervisor so nothing is left to reap it: it must still not outlive the run
# expect: killed_by=signal returncode=none max_wall_s=10
# limits: timeout_s=20
# requires: bwrap
import os
import signal
import sys
import time

if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        os.execve(sys.executable, [sys.executable, "-c", "import time; time.sleep(3600)", "{{PROBE}}"], {})
    os._exit(0)
time.sleep(0.5)
os.kill(os.getppid(), signal.SIGKILL)
time.sleep(30)
