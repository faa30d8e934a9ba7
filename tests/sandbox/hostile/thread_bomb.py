# why: threads count against RLIMIT_NPROC too; starting too many fails instead of exhausting the machine
# expect: returncode=0 stdout_contains="THREADS-LIMITED"
# limits: timeout_s=20 nproc=64
# requires: nproc
import threading
import time

started = 0
try:
    for _ in range(100_000):
        threading.Thread(target=time.sleep, args=(30,), daemon=True).start()
        started += 1
except RuntimeError as exc:
    print(f"THREADS-LIMITED after {started}: {exc}")
