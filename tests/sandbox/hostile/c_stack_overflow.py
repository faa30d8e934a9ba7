# why: recursion in C (json's parser on deep nesting, recursion limit lifted) overflows the stack: SIGSEGV
# expect: killed_by=signal signal=11 returncode=none max_wall_s=5
import json
import sys

sys.setrecursionlimit(10**8)
print(json.loads("[" * 1_000_000 + "]" * 1_000_000))
