# why: replace submission/ itself by a symlink to a folder whose submission.csv links to the answers
# expect: submission=no returncode=0
import os
import shutil

os.makedirs("tmp/fake", exist_ok=True)
os.symlink("{{ANSWERS}}", "tmp/fake/submission.csv")
shutil.rmtree("submission")
os.symlink(os.path.abspath("tmp/fake"), "submission")
print("planted a symlinked folder")
