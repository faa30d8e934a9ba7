# why: wait for input that never comes: stdin is /dev/null, so it fails at once instead of hanging
# expect: returncode=1 stderr_contains="EOFError" max_wall_s=5
input("your answer: ")
