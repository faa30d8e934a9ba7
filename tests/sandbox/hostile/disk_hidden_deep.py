# why: hide 100 MB under a 32 MB disk limit in a folder nested 80 deep (past any path a walk by names can reach) and of mode 0: a count that skips it lets the disk fill
# expect: killed_by=disk max_wall_s=15
# limits: timeout_s=20 disk_mb=32
import os
import time

fd = os.open("working", os.O_RDONLY | os.O_DIRECTORY)
for _ in range(80):
    os.mkdir("h" * 100, dir_fd=fd)
    inner = os.open("h" * 100, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
    os.close(fd)
    fd = inner
block = os.urandom(1 << 20)
for i in range(100):
    with open(os.open(f"fill-{i}", os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=fd), "wb") as f:
        f.write(block)
os.fchmod(fd, 0)
os.close(fd)
time.sleep(30)
print("the disk was not watched")
