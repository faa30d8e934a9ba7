# why: gigabytes to stdout neither fill our memory nor stall us: head and tail kept, the run killed
# expect: killed_by=output min_stdout_bytes=8388608 max_stdout_chars=70000 max_wall_s=10
# limits: timeout_s=30 output_limit_bytes=8388608
import sys

line = b"flood " * 10000 + b"\n"
while True:
    sys.stdout.buffer.write(line)
