# why: binary and invalid UTF-8 output is kept, decoded with replacement characters, and breaks nothing
# expect: returncode=0 stdout_replacement=true stdout_contains="after the bytes"
import os

os.write(1, bytes(range(256)) * 64 + b"\xff\xfe\xc3(\xa0\xa1\n")
os.write(2, b"\x80\x81 not utf-8 \xe2\x28\xa1\n")
print("after the bytes")
