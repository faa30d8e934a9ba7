# why: six processes each stay under the per-process memory limit (RLIMIT_DATA) but hold 1.2 GB together; the limit must bind the whole run
# expect: killed_by=memory max_wall_s=15
# limits: timeout_s=20 memory_mb=256
import os
import time

children = []
for _ in range(6):
    pid = os.fork()
    if pid == 0:
        held = []
        for _ in range(20):  # 200 MB each, touched, 10 MB at a time
            held.append(bytearray(10 << 20))
            time.sleep(0.05)
        time.sleep(30)
        os._exit(0)
    children.append(pid)
for pid in children:
    os.waitpid(pid, 0)
print("1.2 GB held under a 256 MB limit")
