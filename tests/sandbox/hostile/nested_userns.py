# why: make a user namespace to get capabilities, then remount the read-only input writable
# expect: returncode=0 stdout_contains="BLOCKED"
# requires: bwrap
import ctypes
import os

libc = ctypes.CDLL(None, use_errno=True)
CLONE_NEWUSER, CLONE_NEWNS = 0x10000000, 0x00020000
MS_REMOUNT, MS_BIND = 32, 4096
if libc.unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0:
    print("BLOCKED unshare", os.strerror(ctypes.get_errno()))
else:
    print("unshare worked (capabilities inside a new namespace only)")
    if libc.mount(None, b"/workspace/input", None, MS_REMOUNT | MS_BIND, None) != 0:
        print("BLOCKED remount", os.strerror(ctypes.get_errno()))
    for target in ("/workspace/input/pwned", "/usr/pwned-{{PROBE}}"):
        try:
            with open(target, "w") as f:
                f.write("x")
            print("LEAK wrote", target)
        except OSError as exc:
            print("BLOCKED write", target, type(exc).__name__)
