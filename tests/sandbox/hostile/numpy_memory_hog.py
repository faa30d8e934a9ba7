# why: one huge numpy allocation fails with numpy's own out-of-memory error
# expect: killed_by=memory returncode=1 stderr_contains="Unable to allocate"
# limits: timeout_s=20 memory_mb=256
import numpy as np

a = np.ones((1 << 31,), dtype=np.float64)
print(a.sum())
