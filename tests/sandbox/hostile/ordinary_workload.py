# why: not hostile: what ordinary solutions do (threads, multiprocessing, joblib and scikit-learn with n_jobs=2, temporary files, /dev/shm) must keep working under the sandbox's filters and limits
# expect: returncode=0 stdout_contains="ORDINARY OK"
# limits: timeout_s=120
import multiprocessing
import tempfile
import threading

import numpy as np
import pandas as pd
from joblib import Parallel, delayed
from sklearn.ensemble import RandomForestClassifier
from sklearn.model_selection import cross_val_score


def square(x):
    return x * x


if __name__ == "__main__":
    box = []
    thread = threading.Thread(target=box.append, args=(1,))
    thread.start()
    thread.join()
    assert box == [1]
    with multiprocessing.Pool(2) as pool:
        assert pool.map(square, range(4)) == [0, 1, 4, 9]
    assert Parallel(n_jobs=2)(delayed(square)(i) for i in range(4)) == [0, 1, 4, 9]
    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 4))
    y = (X[:, 0] > 0).astype(int)
    scores = cross_val_score(RandomForestClassifier(n_estimators=10, n_jobs=2, random_state=0), X, y, cv=2, n_jobs=2)
    assert scores.mean() > 0.6
    with tempfile.TemporaryFile() as f:
        f.write(b"x" * 1000)
        f.seek(0)
        assert len(f.read()) == 1000
    with tempfile.NamedTemporaryFile(suffix=".csv") as f:
        pd.DataFrame({"a": [1, 2]}).to_csv(f.name, index=False)
        assert pd.read_csv(f.name)["a"].tolist() == [1, 2]
    shared = multiprocessing.Array("d", 4)
    shared[0] = 1.0
    print("ORDINARY OK")
