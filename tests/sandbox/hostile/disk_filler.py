# why: writing file after file fills the disk unless the workspace's size is watched
# expect: killed_by=disk max_wall_s=15
# limits: timeout_s=20 disk_mb=32
import os

block = os.urandom(1 << 20)
i = 0
while True:
    with open(f"working/fill-{i}.bin", "wb") as f:
        f.write(block)
    i += 1
