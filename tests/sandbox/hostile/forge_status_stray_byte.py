# why: write a complete forged clean exit plus one stray byte into the status pipe (the supervisor's real exit line then cannot be parsed, the forged one would be the last good line), then fail: never a clean exit
# expect: ok=false
# limits: timeout_s=20
import os
import sys

FORGED = b'{"event": "exit", "returncode": 0, "signal": null, "timed_out": false, "cpu_s": 0.1, "maxrss_kb": 1}\nx'
supervisor = os.getppid()
own = {os.readlink(f"/proc/self/fd/{fd}") for fd in (1, 2)}
bypass = "ROOT" if os.geteuid() == 0 else "LEAK"
try:
    fds = os.listdir(f"/proc/{supervisor}/fd")
except OSError as exc:
    fds = []
    print("BLOCKED listing the supervisor's descriptors:", type(exc).__name__)
for fd in fds:
    path = f"/proc/{supervisor}/fd/{fd}"
    try:
        link = os.readlink(path)
        if not link.startswith("pipe:") or link in own:
            continue
        pipe = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
    except OSError:
        continue
    try:
        os.write(pipe, FORGED)
        print(f"{bypass} wrote into the supervisor's fd {fd}")
    except OSError:
        pass
    finally:
        os.close(pipe)
sys.exit(3)
