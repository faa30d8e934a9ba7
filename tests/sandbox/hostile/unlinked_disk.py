# why: write past disk_mb in files unlinked while open: the workspace walk sees no name for them
# expect: killed_by=disk
# limits: disk_mb=16 timeout_s=20
import os
import time

held = []
for i in range(4):  # 4 x 8 MiB, each under RLIMIT_FSIZE (disk_mb)
    f = open(f"tmp/hidden-{i}", "wb")  # noqa: SIM115 - held open on purpose
    os.unlink(f"tmp/hidden-{i}")
    f.write(b"\x01" * (8 << 20))
    f.flush()
    held.append(f)
time.sleep(5)  # the parent's poll would see it here
print("LEAK 32 MiB in unlinked files at disk_mb=16, not stopped")
