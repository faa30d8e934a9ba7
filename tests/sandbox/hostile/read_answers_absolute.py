# why: open the private answers by their absolute path on the host
# expect: returncode=0 submission=no stdout_contains="BLOCKED"
# requires: bwrap
for path in ("{{ANSWERS}}", "{{PRIVATE}}/canary.txt"):
    try:
        with open(path) as f:
            print("LEAK absolute", path, f.read()[:200])
    except OSError as exc:
        print("BLOCKED", type(exc).__name__)
