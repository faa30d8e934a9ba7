# why: burn CPU past RLIMIT_CPU (set below the wall-clock limit here): SIGXCPU ends it
# expect: killed_by=cpu signal=24 max_wall_s=6
# limits: timeout_s=20 cpu_s=1
while True:
    pass
