# why: unbounded Python recursion ends in a RecursionError, an ordinary failure
# expect: returncode=1 killed_by=none stderr_contains="RecursionError"
def f(n):
    return f(n + 1)


f(0)
