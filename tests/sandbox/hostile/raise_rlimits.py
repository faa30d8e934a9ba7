# why: lift the limits the sandbox set (only a privileged process may raise a hard limit)
# expect: returncode=0 stdout_contains="BLOCKED"
# requires: bwrap
import resource

for name in ("RLIMIT_DATA", "RLIMIT_AS", "RLIMIT_NPROC", "RLIMIT_FSIZE", "RLIMIT_CPU"):
    which = getattr(resource, name)
    try:
        resource.setrlimit(which, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
        print("LEAK raised", name)
    except (ValueError, OSError) as exc:
        print("BLOCKED", name, exc)
