# why: reach a server the parent runs on 127.0.0.1 (the test listens there for real)
# expect: returncode=0 stdout_contains="BLOCKED"
# requires: bwrap
import socket

try:
    with socket.create_connection(("127.0.0.1", int("{{PORT}}")), timeout=2) as s:
        print("LEAK connected to the parent's listener")
except OSError as exc:
    print("BLOCKED loopback", type(exc).__name__, exc)
try:
    with socket.create_connection(("localhost", int("{{PORT}}")), timeout=2) as s:
        print("LEAK connected via localhost")
except OSError as exc:
    print("BLOCKED localhost", type(exc).__name__)
