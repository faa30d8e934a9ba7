# why: a child in its own session outlives its parent; the run must end when the script does, child killed
# expect: returncode=0 killed_by=none max_wall_s=4
# limits: timeout_s=20
import os
import time

if os.fork() == 0:
    os.setsid()
    time.sleep(3600)
    os._exit(0)
print("parent leaves its child behind")
