# why: destroy the public data through ./input (read-only bind; unisolated, a private copy)
# expect: returncode=0
import os
import shutil

for action, call in [
    ("remove", lambda: os.remove("input/train.csv")),
    ("truncate", lambda: open("input/test.csv", "w").close()),
    ("chmod", lambda: os.chmod("input/sample_submission.csv", 0o777)),
    ("rmtree", lambda: shutil.rmtree("input")),
]:
    try:
        call()
        print("done (only this run's copy, unisolated)", action)
    except OSError as exc:
        print("BLOCKED", action, type(exc).__name__)
