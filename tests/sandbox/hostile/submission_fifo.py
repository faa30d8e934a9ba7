# why: leave a FIFO as the submission: a grader that opened it would block forever (or read what a leftover writer sends)
# expect: returncode=0 submission=no max_wall_s=10
# limits: timeout_s=20
import os

os.mkfifo("submission/submission.csv")
print("left a fifo")
