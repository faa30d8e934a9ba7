# why: write past disk_mb in unlinked files kept only by a mapping (the descriptor closed): no name, no open file
# expect: killed_by=disk
# limits: disk_mb=16 timeout_s=20
import mmap
import os
import time

held = []
for i in range(4):  # 4 x 8 MiB, each under RLIMIT_FSIZE (disk_mb)
    fd = os.open(f"working/mapped-{i}", os.O_CREAT | os.O_RDWR, 0o600)
    os.unlink(f"working/mapped-{i}")
    os.write(fd, b"\x01" * (8 << 20))
    held.append(mmap.mmap(fd, 8 << 20))
    os.close(fd)
time.sleep(5)  # the parent's poll would see it here
print("LEAK 32 MiB in mapped unlinked files at disk_mb=16, not stopped")
