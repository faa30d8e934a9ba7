# why: abort() (a C library's assertion) ends in SIGABRT, with no core file left behind (RLIMIT_CORE=0)
# expect: killed_by=signal signal=6
import os

os.abort()
