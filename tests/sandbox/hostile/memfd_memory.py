# why: hold memory no process's resident set shows: a memfd written to (never mapped) is shared memory that neither RLIMIT_DATA nor the parent's Pss poll counts
# expect: returncode=0 stdout_contains="BLOCKED memfd"
# limits: memory_mb=256 timeout_s=20
# requires: bwrap
import os
import time

try:
    fd = os.memfd_create("hog")
except OSError as exc:
    print("BLOCKED memfd", exc.errno, exc.strerror)
    raise SystemExit(0) from None
chunk = b"\x01" * (16 << 20)
for _ in range(32):  # 512 MiB: twice the limit
    os.write(fd, chunk)
print("memfd holds", os.fstat(fd).st_size >> 20, "MiB")
time.sleep(3)  # the parent's poll would see it here
print("LEAK memfd: 512 MiB held at memory_mb=256, not stopped")
