# why: os._exit skips every handler; its code is reported as is
# expect: returncode=3 killed_by=none
import os

print("leaving", flush=True)
os._exit(3)
