# why: millions of empty files exhaust inodes without using bytes; the number of entries is capped
# expect: killed_by=disk max_wall_s=15
# limits: timeout_s=20 max_files=2000
import os

os.makedirs("working/many", exist_ok=True)
i = 0
while True:
    open(f"working/many/{i}", "w").close()
    i += 1
