# why: the same flood on stderr
# expect: killed_by=output max_wall_s=10
# limits: timeout_s=30 output_limit_bytes=8388608
import os

block = b"E" * (1 << 16)
while True:
    os.write(2, block)
