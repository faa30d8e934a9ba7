# why: a classic daemon (double fork, setsid, closed stdio, empty environment, exec) hides from markers
# expect: returncode=0 killed_by=none max_wall_s=4
# limits: timeout_s=20
import os
import sys

if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        os.execve(sys.executable, [sys.executable, "-c", "import time; time.sleep(3600)", "{{PROBE}}"], {})
    os._exit(0)
os.wait()
print("daemon started")
