# why: the control case for scratch space: $TMPDIR, $HOME, /dev/shm and ./working are writable
# expect: returncode=0 stdout_contains="SCRATCH-OK"
import os
import tempfile

with tempfile.NamedTemporaryFile(dir=None) as f:
    f.write(b"x" * 1024)
os.makedirs(os.path.expanduser("~/.cache/x"), exist_ok=True)
with open("working/notes.txt", "w") as f:
    f.write("scratch")
if os.path.isdir("/dev/shm"):
    from multiprocessing import shared_memory

    shm = shared_memory.SharedMemory(create=True, size=1 << 20)
    shm.close()
    shm.unlink()
print("SCRATCH-OK", tempfile.gettempdir(), os.path.expanduser("~"))
