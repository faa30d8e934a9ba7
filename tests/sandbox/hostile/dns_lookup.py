# why: resolve a public name (a DNS query is already a way out)
# expect: returncode=0 stdout_contains="BLOCKED" max_wall_s=8
# requires: bwrap
import socket

try:
    print("LEAK resolved", socket.getaddrinfo("example.com", 80)[:1])
except OSError as exc:
    print("BLOCKED dns", type(exc).__name__)
