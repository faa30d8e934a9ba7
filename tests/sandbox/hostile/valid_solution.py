# why: the control case: an honest least-squares solution, read from ./input, written to ./submission
# expect: returncode=0 killed_by=none submission=yes grade=valid
import numpy as np
import pandas as pd

train = pd.read_csv("input/train.csv")
test = pd.read_csv("input/test.csv")
X = np.c_[np.ones(len(train)), train[["x1", "x2"]]]
coef, *_ = np.linalg.lstsq(X, train["y"], rcond=None)
pred = np.c_[np.ones(len(test)), test[["x1", "x2"]]] @ coef
pd.DataFrame({"id": test["id"], "y": pred}).to_csv("submission/submission.csv", index=False)
print("train rmse", float(np.sqrt(np.mean((X @ coef - train["y"]) ** 2))))
