# why: stop the supervisor, write a forged clean exit into its status pipe through /proc/<supervisor>/fd, sleep past the timeout, kill the supervisor and exit 0: a timeout, never a clean exit
# expect: timed_out=true killed_by=timeout max_wall_s=8
# limits: timeout_s=2 kill_grace_s=3
import os
import signal
import time

FORGED = b'{"event": "exit", "returncode": 0, "signal": null, "timed_out": false, "cpu_s": 0.1, "maxrss_kb": 1}\n'
supervisor = os.getppid()
os.kill(supervisor, signal.SIGSTOP)
with open("submission/submission.csv", "w") as f:
    f.write("id,y\n")
own = {os.readlink(f"/proc/self/fd/{fd}") for fd in (1, 2)}
# Root without a sandbox may do anything by design (CAP_SYS_PTRACE); anyone else must be stopped.
bypass = "ROOT" if os.geteuid() == 0 else "LEAK"
try:
    fds = os.listdir(f"/proc/{supervisor}/fd")
    print(f"{bypass} the supervisor's descriptors can be listed")
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
        print(f"{bypass} wrote a forged exit into the supervisor's fd {fd}")
    except OSError:
        pass
    finally:
        os.close(pipe)
for name in ("environ", "mem"):
    try:
        with open(f"/proc/{supervisor}/{name}", "rb") as f:
            f.read(1)
        print(f"{bypass} read the supervisor's {name}")
    except OSError as exc:
        print(f"BLOCKED the supervisor's {name}:", type(exc).__name__)
time.sleep(3)
os.kill(supervisor, signal.SIGKILL)
print("done")
