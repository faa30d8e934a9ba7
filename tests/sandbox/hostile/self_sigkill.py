# why: SIGKILL to itself (what an OOM killer would do) is reported as signal 9
# expect: killed_by=signal signal=9 returncode=none
import os
import signal

os.kill(os.getpid(), signal.SIGKILL)
