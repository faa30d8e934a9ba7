# why: ptrace the run's pid 1 and its supervisor (to rewrite the exit status they report, or reach their descriptors)
# expect: returncode=0 stdout_contains="BLOCKED ptrace"
# requires: bwrap
import ctypes
import os

libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
PTRACE_ATTACH, PTRACE_DETACH = 16, 17
for pid in sorted({1, os.getppid()} - {os.getpid()}):
    if libc.ptrace(PTRACE_ATTACH, pid, None, None) == 0:
        print("LEAK attached to", pid)
        os.waitpid(pid, 0)
        libc.ptrace(PTRACE_DETACH, pid, None, None)
    else:
        print("BLOCKED ptrace", pid, os.strerror(ctypes.get_errno()))
    for name in ("mem", "fd"):
        try:
            if name == "fd":
                print("LEAK listed", pid, name, os.listdir(f"/proc/{pid}/fd"))
            else:
                open(f"/proc/{pid}/{name}", "rb").close()
                print("LEAK opened", pid, name)
        except OSError as exc:
            print("BLOCKED", pid, name, type(exc).__name__)
