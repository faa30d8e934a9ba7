# why: keep part of the run's memory in /dev/shm (a tmpfs: in no process's resident set) so that heap plus shared memory passes memory_mb
# expect: killed_by=memory
# limits: memory_mb=256 timeout_s=20
# requires: bwrap
import os
import time

if os.fork() == 0:  # another process, first: its own RLIMIT_DATA, no copy of the heap below
    more = b"\x03" * (100 << 20)
    time.sleep(15)
    os._exit(0)
with open("/dev/shm/hold", "wb") as f:  # the run's private /dev/shm: 128 MiB at most here
    for _ in range(7):
        f.write(b"\x01" * (16 << 20))
heap = b"\x02" * (200 << 20)  # under RLIMIT_DATA
time.sleep(10)  # 112 + 200 + 100 MiB: only counting /dev/shm puts it over memory_mb + slack
print("LEAK heap plus /dev/shm over memory_mb, not stopped")
