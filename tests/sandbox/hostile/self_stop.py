# why: a stopped process is neither running nor dead; the timeout still ends it
# expect: killed_by=timeout timed_out=true max_wall_s=6
# limits: timeout_s=2
import os
import signal

os.kill(os.getpid(), signal.SIGSTOP)
