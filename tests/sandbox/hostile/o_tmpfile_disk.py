# why: write past disk_mb in O_TMPFILE files (never linked anywhere), as issue 31 found; refused, as tempfile falls back to create-and-unlink
# expect: killed_by=disk
# limits: disk_mb=16 timeout_s=20
import os
import time

held = []
for _ in range(4):  # 4 x 8 MiB, each under RLIMIT_FSIZE (disk_mb)
    try:
        fd = os.open("tmp", os.O_TMPFILE | os.O_RDWR, 0o600)
    except OSError as exc:
        print("O_TMPFILE refused:", exc.strerror)
        fd = os.open("tmp/fallback", os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
        os.unlink("tmp/fallback")
    os.write(fd, b"\x01" * (8 << 20))
    held.append(fd)
time.sleep(5)  # the parent's poll would see it here
print("LEAK 32 MiB in O_TMPFILE files at disk_mb=16, not stopped")
