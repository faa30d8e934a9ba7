# why: exit code 137 looks like a SIGKILL to a shell (128 + 9); the supervisor reports what really happened
# expect: returncode=137 signal=none killed_by=none
import os

os._exit(137)
