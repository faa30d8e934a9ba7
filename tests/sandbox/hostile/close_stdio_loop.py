# why: close stdout and stderr (EOF on our pipes) and keep running: EOF is not the end of the run
# expect: killed_by=timeout timed_out=true max_wall_s=6
# limits: timeout_s=2
import os

os.close(1)
os.close(2)
while True:
    pass
