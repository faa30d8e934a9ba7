# why: write to /dev, a tmpfs bwrap makes (as a user, owned by the sandbox user): memory outside every limit, and under the warm pool a folder every run shares
# expect: returncode=0 stdout_contains="BLOCKED /dev"
# requires: bwrap
import os

path = "/dev/mleforge-probe-{{PROBE}}"
try:
    with open(path, "wb") as f:
        f.write(b"\x01" * (1 << 20))
    print("LEAK wrote", path)
    os.unlink(path)
except OSError as exc:
    print("BLOCKED /dev", type(exc).__name__, exc.strerror)
