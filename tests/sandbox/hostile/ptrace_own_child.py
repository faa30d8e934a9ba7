# why: ptrace or process_vm_readv/writev a process of its own (its child: same uid, allowed without the seccomp filter), the tools it would turn on anything it can reach
# expect: returncode=0 stdout_contains="BLOCKED ptrace EPERM BLOCKED process_vm_readv EPERM BLOCKED process_vm_writev EPERM"
# requires: bwrap
import ctypes
import errno
import os
import signal
import time

libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]


class IoVec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


child = os.fork()
if child == 0:
    time.sleep(30)
    os._exit(0)
buffer = ctypes.create_string_buffer(8)
local = IoVec(ctypes.cast(buffer, ctypes.c_void_p), 8)
remote = IoVec(ctypes.cast(buffer, ctypes.c_void_p), 8)  # the same address in the forked child
words = []
if libc.ptrace(16, child, None, None) == 0:  # PTRACE_ATTACH
    words.append("LEAK ptrace attached")
else:
    words.append(f"BLOCKED ptrace {errno.errorcode[ctypes.get_errno()]}")
for name in ("process_vm_readv", "process_vm_writev"):
    call = getattr(libc, name)
    call.argtypes = [ctypes.c_int, ctypes.POINTER(IoVec), ctypes.c_ulong, ctypes.POINTER(IoVec), ctypes.c_ulong,
                     ctypes.c_ulong]
    if call(child, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0) == 8:
        words.append(f"LEAK {name}")
    else:
        words.append(f"BLOCKED {name} {errno.errorcode[ctypes.get_errno()]}")
print(" ".join(words))
os.kill(child, signal.SIGKILL)
os.waitpid(child, 0)
