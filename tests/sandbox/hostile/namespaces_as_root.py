# why: make user and network namespaces (every capability inside them, CAP_NET_ADMIN included), which root's runs could and a user's cannot
# expect: returncode=0 stdout_contains="BLOCKED unshare(CLONE_NEWUSER)"
# requires: bwrap
import ctypes
import os
import platform
import signal

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
CLONE_NEWUSER, CLONE_NEWNET, CLONE_NEWNS, CLONE_NEWPID = 0x10000000, 0x40000000, 0x00020000, 0x20000000
SYS_CLONE = {"x86_64": 56, "aarch64": 220}[platform.machine()]
for name, flags in (("CLONE_NEWUSER", CLONE_NEWUSER), ("CLONE_NEWNET", CLONE_NEWNET),
                    ("CLONE_NEWUSER|CLONE_NEWNET", CLONE_NEWUSER | CLONE_NEWNET)):
    if os.fork() == 0:  # each try in a child: a namespace made is not kept
        if libc.unshare(flags) == 0:
            print(f"LEAK unshare({name}) worked", flush=True)
        else:
            print(f"BLOCKED unshare({name})", os.strerror(ctypes.get_errno()), flush=True)
        os._exit(0)
    os.wait()
# clone(2) with the same flags, as a raw system call
pid = libc.syscall(SYS_CLONE, CLONE_NEWUSER | CLONE_NEWNET | signal.SIGCHLD, None, None, None, None)
if pid == 0:
    os._exit(0)
if pid > 0:
    os.waitpid(pid, 0)
    print("LEAK clone(CLONE_NEWUSER|CLONE_NEWNET) worked")
else:
    print("BLOCKED clone", os.strerror(ctypes.get_errno()))
