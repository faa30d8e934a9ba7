# why: kill the process that watches the script (its parent, the supervisor); the run still ends cleanly
# expect: killed_by=signal returncode=none max_wall_s=5
# limits: timeout_s=20
import os
import signal
import time

os.kill(os.getppid(), signal.SIGKILL)
time.sleep(30)
print("still running")
