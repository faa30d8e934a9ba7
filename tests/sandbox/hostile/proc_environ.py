# why: read the parent's (and every visible process's) environment and command line through /proc
# expect: returncode=0 stdout_contains="pids visible"
# requires: bwrap
import os

pids = [p for p in os.listdir("/proc") if p.isdigit()]
print("pids visible:", pids)
for pid in pids + [str(os.getppid())]:
    for name in ("environ", "cmdline"):
        try:
            with open(f"/proc/{pid}/{name}", "rb") as f:
                print(pid, name, f.read()[:400])
        except OSError as exc:
            print(pid, name, "BLOCKED", type(exc).__name__)
