# why: change directory, then write the submission relative to the new one: it is not where it counts
# expect: returncode=0 submission=no
import os
import tempfile

os.chdir(tempfile.gettempdir())
os.makedirs("submission", exist_ok=True)
with open("submission/submission.csv", "w") as f:
    f.write("id,y\n")
print("wrote", os.path.abspath("submission/submission.csv"))
