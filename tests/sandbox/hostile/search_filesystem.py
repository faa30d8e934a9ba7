# why: search the whole visible file system for anything that looks like answers
# expect: returncode=0 stdout_contains="BLOCKED" max_wall_s=15
# limits: timeout_s=20
# requires: bwrap
import os
import time

deadline = time.monotonic() + 3
hits = []
for root, dirs, files in os.walk("/"):
    if root in ("/proc", "/sys", "/dev") or time.monotonic() > deadline:
        dirs[:] = []
        continue
    for name in files:
        # A task's private folder, not any folder named so (/usr/include/nspr/private is one).
        parts = root.split("/")
        if name in ("answers.csv", "canary.txt") or ("private" in parts and "{{TASK_ID}}" in parts):
            hits.append(os.path.join(root, name))
for path in hits:
    try:
        with open(path, errors="replace") as f:
            print("LEAK found", path, f.read()[:200])
    except OSError:
        pass
print("BLOCKED: searched, found", len(hits), "candidates")
