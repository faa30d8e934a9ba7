# why: an inherited descriptor (say an O_PATH one of a bind source) would lead out of the sandbox
# expect: returncode=0 stdout_contains="fds:"
import os

fds = sorted(int(fd) for fd in os.listdir("/proc/self/fd"))
print("fds:", fds)
for fd in fds:
    if fd < 3:
        continue
    target = os.readlink(f"/proc/self/fd/{fd}") if os.path.exists(f"/proc/self/fd/{fd}") else "?"
    for rel in ("../private/answers.csv", "../../private/answers.csv", "private/answers.csv"):
        try:
            with open(f"/proc/self/fd/{fd}/{rel}") as f:
                print("LEAK fd", fd, target, f.read()[:100])
        except OSError:
            pass
