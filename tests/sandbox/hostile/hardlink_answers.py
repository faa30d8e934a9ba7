# why: hard-link the private answers into the submission (a hard link is no symlink)
# expect: submission=no returncode=0 stdout_contains="BLOCKED"
# requires: bwrap
import os

try:
    os.link("{{ANSWERS}}", "submission/submission.csv")
    print("LEAK linked the answers")
except OSError as exc:
    print("BLOCKED", type(exc).__name__)
