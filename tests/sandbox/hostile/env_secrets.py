# why: print the environment looking for tokens and keys of the parent
# expect: returncode=0 stdout_contains="HOME="
import os

for key, value in sorted(os.environ.items()):
    print(f"{key}={value}")
    if any(word in key for word in ("TOKEN", "SECRET", "KEY", "PASSWORD", "AWS", "CREDENTIAL")):
        print("LEAK env", key)
