# why: allocating without end fails at the memory limit (RLIMIT_DATA) instead of swapping the machine
# expect: killed_by=memory returncode=1 stderr_contains="MemoryError"
# limits: timeout_s=20 memory_mb=256
blocks = []
while True:
    blocks.append(bytearray(32 << 20))
