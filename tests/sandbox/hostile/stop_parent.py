# why: SIGSTOP the supervisor so its timer cannot fire; the parent's own deadline still ends the run
# expect: killed_by=timeout timed_out=true max_wall_s=8
# limits: timeout_s=2 kill_grace_s=2
import os
import signal
import time

os.kill(os.getppid(), signal.SIGSTOP)
time.sleep(3600)
