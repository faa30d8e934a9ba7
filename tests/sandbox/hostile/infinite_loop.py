# why: a busy loop that never ends is ended by the wall-clock timeout
# expect: killed_by=timeout timed_out=true returncode=none max_wall_s=5
# limits: timeout_s=2
while True:
    pass
