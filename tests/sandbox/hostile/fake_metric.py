# why: print a perfect score and exit 0 without a submission: scores come from grading, so it earns nothing
# expect: returncode=0 submission=no stdout_contains="Validation RMSE"
print("Validation RMSE: 0.00000")
print("Final score: 1.0 (gold medal)")
