# why: climb out of the workspace with relative paths to the private answers
# expect: returncode=0 submission=no stdout_contains="BLOCKED"
# requires: bwrap
import os

suffixes = [
    "private/answers.csv", "prepared/private/answers.csv", "{{TASK_ID}}/prepared/private/answers.csv",
    "private/canary.txt", "prepared/private/canary.txt",
]
candidates = [os.path.relpath("{{ANSWERS}}")]
for depth in range(1, 12):
    candidates += ["../" * depth + s for s in suffixes]
found = False
for path in candidates:
    try:
        with open(path) as f:
            print("LEAK relative", path, f.read()[:200])
            found = True
    except OSError:
        pass
if not found:
    print("BLOCKED: no answers reachable by a relative path")
