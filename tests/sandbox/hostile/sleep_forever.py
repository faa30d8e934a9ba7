# why: a script that sleeps (no CPU use) is ended by the wall-clock timeout too
# expect: killed_by=timeout timed_out=true max_wall_s=5
# limits: timeout_s=2
import time

time.sleep(3600)
