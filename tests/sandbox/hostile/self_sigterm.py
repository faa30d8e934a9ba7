# why: a script that terminates itself with SIGTERM is reported as ended by that signal
# expect: killed_by=signal signal=15 returncode=none
import os
import signal

os.kill(os.getpid(), signal.SIGTERM)
