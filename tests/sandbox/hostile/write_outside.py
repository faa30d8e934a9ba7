# why: write files outside the workspace: the test's sentinel folder, the system, the data root, the home
# expect: returncode=0 stdout_contains="BLOCKED"
# requires: bwrap
import os

targets = [
    "{{SENTINEL}}/pwned-{{PROBE}}", "/usr/pwned-{{PROBE}}", "/etc/pwned-{{PROBE}}", "/pwned-{{PROBE}}",
    "/root/pwned-{{PROBE}}", "{{DATA_ROOT}}/pwned-{{PROBE}}", "{{PUBLIC}}/pwned-{{PROBE}}",
    "../pwned-{{PROBE}}", "../../pwned-{{PROBE}}", "/dev/pwned-{{PROBE}}", "/proc/pwned-{{PROBE}}",
]
for path in targets:
    try:
        with open(path, "w") as f:
            f.write("pwned")
        print("wrote (must be inside the sandbox only)", path)
    except OSError as exc:
        print("BLOCKED", path, type(exc).__name__)
# Creating the sentinel's path inside the sandbox is allowed: it lands in the private /tmp.
try:
    os.makedirs("{{SENTINEL}}", exist_ok=True)
    with open("{{SENTINEL}}/pwned-{{PROBE}}", "w") as f:
        f.write("pwned")
    print("wrote the sentinel path, inside the private /tmp")
except OSError as exc:
    print("BLOCKED makedirs", type(exc).__name__)
