# why: use the kernel keyring as a channel between runs (read a key an earlier run or the executor left, leave one for the next)
# expect: returncode=0 stdout_contains="BLOCKED add_key"
# requires: bwrap
import ctypes
import os
import platform

NUMBERS = {"x86_64": (248, 249, 250), "aarch64": (217, 218, 219)}
ADD_KEY, REQUEST_KEY, KEYCTL = NUMBERS[platform.machine()]
KEY_SPEC_SESSION_KEYRING, KEY_SPEC_USER_KEYRING = -3, -4
KEYCTL_GET_KEYRING_ID, KEYCTL_READ = 0, 11
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long


def call(*args):
    result = libc.syscall(*args)
    return result, os.strerror(ctypes.get_errno()) if result < 0 else ""


for name in (b"mleforge-left-by-a-run", b"mleforge-executor-secret"):
    key, why = call(REQUEST_KEY, b"user", name, None, 0)
    if key >= 0:
        buf = ctypes.create_string_buffer(256)
        size, _ = call(KEYCTL, KEYCTL_READ, key, buf, 256)
        print("LEAK found key", name, buf.raw[:max(size, 0)])
    else:
        print("no key", name, why)
keyring, why = call(KEYCTL, KEYCTL_GET_KEYRING_ID, KEY_SPEC_SESSION_KEYRING, 0)
print("session keyring", keyring, why)
for ring in (KEY_SPEC_SESSION_KEYRING, KEY_SPEC_USER_KEYRING):
    key, why = call(ADD_KEY, b"user", b"mleforge-left-by-a-run", b"run-payload", 11, ring)
    print("added key" if key >= 0 else "BLOCKED add_key", ring, why)
