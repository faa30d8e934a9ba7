# why: one ever-growing file stops at RLIMIT_FSIZE (the write fails with EFBIG)
# expect: returncode=1 stderr_contains="File too large" killed_by=none
# limits: timeout_s=20 file_size_mb=8 disk_mb=64
block = b"\0" * (1 << 20)
with open("working/big.bin", "wb") as f:
    while True:
        f.write(block)
        f.flush()
