# why: destroy the task's shared public data by its absolute path on the host
# expect: returncode=0 stdout_contains="BLOCKED"
# requires: bwrap
import os
import shutil

for action, call in [
    ("remove", lambda: os.remove("{{PUBLIC}}/train.csv")),
    ("rmtree", lambda: shutil.rmtree("{{PUBLIC}}")),
    ("rename", lambda: os.rename("{{PUBLIC}}/test.csv", "{{PUBLIC}}/gone.csv")),
]:
    try:
        call()
        print("LEAK", action)
    except OSError as exc:
        print("BLOCKED", action, type(exc).__name__)
