# why: a valid submission written before a crash is still returned, with the crash's exit code
# expect: returncode=1 submission=yes grade=valid stderr_contains="RuntimeError"
import pandas as pd

test = pd.read_csv("input/test.csv")
pd.DataFrame({"id": test["id"], "y": 1000.0}).to_csv("submission/submission.csv", index=False)
raise RuntimeError("crash after writing the submission")
