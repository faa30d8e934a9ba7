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
    try:
        open(f"/proc/{pid}/mem", "rb").close()
        print("LEAK opened", pid, "mem")
    except OSError as exc:
        print("BLOCKED", pid, "mem", type(exc).__name__)
    # Listing the descriptor numbers (what `ls /proc/1/fd` shows for a process of one's own uid)
    # gives nothing; reaching one (opening it, or reading where it points) would.
    try:
        numbers = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        numbers = []
    for number in numbers:
        for how, reach in (("readlink", os.readlink), ("open", lambda p: open(p, "rb").close())):
            try:
                reach(f"/proc/{pid}/fd/{number}")
                print("LEAK", how, pid, "fd", number)
            except OSError as exc:
                print("BLOCKED", how, pid, "fd", number, type(exc).__name__)
