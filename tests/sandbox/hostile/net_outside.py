# why: reach the outside world; 192.0.2.1 is TEST-NET-1 (never routed), and without a route no packet leaves
# expect: returncode=0 stdout_contains="BLOCKED" max_wall_s=6
# requires: bwrap
import socket

try:
    with socket.create_connection(("192.0.2.1", 80), timeout=1):
        print("LEAK connected outside")
except OSError as exc:
    print("BLOCKED outside", type(exc).__name__, exc)
try:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.sendto(b"x", ("192.0.2.1", 53))
    print("LEAK udp sent")
except OSError as exc:
    print("BLOCKED udp", type(exc).__name__)
