# why: plant a file in the interpreter's site-packages (a .pth there runs in every later Python)
# expect: returncode=0 stdout_contains="BLOCKED"
# requires: bwrap
for path in ("{{SITE_PACKAGES}}/mleforge-probe-{{PROBE}}.pth", "{{SITE_PACKAGES}}/../mleforge-probe-{{PROBE}}"):
    try:
        with open(path, "w") as f:
            f.write("# harmless probe\n")
        print("LEAK wrote", path)
    except OSError as exc:
        print("BLOCKED", type(exc).__name__)
