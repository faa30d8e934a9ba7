# why: a fork bomb is held by RLIMIT_NPROC and ended, all of it, by the timeout
# expect: killed_by=timeout timed_out=true max_wall_s=7
# limits: timeout_s=3 nproc=48
# requires: nproc
import os
import time

while True:
    try:
        os.fork()
    except OSError:
        time.sleep(0.01)
