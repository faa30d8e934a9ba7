"""A real HTTP server on 127.0.0.1 that speaks OpenAI chat completions, with scripted failures."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    """What the server does with one request: answer `status` (200 = completions), maybe late."""

    status: int = 200
    message: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0


@dataclass
class Seen:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]


class ChatServer:
    """Serves `model`; `script` replies to requests in arrival order, then plain successes.

    `max_choices` caps the choices per answer (a server that ignores `n`); `delay_s` makes every
    answer late so requests overlap; `required_key` answers 401 to any other bearer token, and
    echoes the token it got (as some servers do) to test that the client redacts it.
    """

    def __init__(self, *, model: str = "test-model", script: list[Reply] | None = None,
                 max_choices: int | None = None, delay_s: float = 0.0,
                 required_key: str | None = None):
        self.model = model
        self.script = list(script or [])
        self.max_choices = max_choices
        self.delay_s = delay_s
        self.required_key = required_key
        self.seen: list[Seen] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def __enter__(self) -> ChatServer:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)

    def _next_reply(self, seen: Seen) -> Reply:
        with self._lock:
            self.seen.append(seen)
            return self.script.pop(0) if self.script else Reply(delay_s=self.delay_s)

    def _answer(self, body: dict[str, Any]) -> dict[str, Any]:
        n = int(body.get("n", 1))
        if self.max_choices is not None:
            n = min(n, self.max_choices)
        last = body["messages"][-1]["content"]
        choices = [{"index": k, "finish_reason": "stop",
                    "message": {"role": "assistant", "content": f"answer {k} to {last}"}}
                   for k in range(n)]
        prompt_tokens = sum(len(m["content"].split()) for m in body["messages"])
        return {"id": "chatcmpl-1", "object": "chat.completion", "model": self.model,
                "choices": choices,
                "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": 4 * n,
                          "total_tokens": prompt_tokens + 4 * n}}

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep test output clean
                pass

            def do_POST(self):
                length = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(length))
                seen = Seen(self.path, dict(self.headers), body)
                # In flight until the answer is ready, not until it is written: once the
                # client has read it, it may send its next request while this thread has
                # yet to come back from the write (on a loaded machine, a false 3rd).
                with server._lock:
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                try:
                    reply = server._next_reply(seen)
                    time.sleep(reply.delay_s)
                finally:
                    with server._lock:
                        server.in_flight -= 1
                self._respond(reply, body)

            def _respond(self, reply: Reply, body: dict[str, Any]):
                auth = self.headers.get("Authorization", "")
                if server.required_key and auth != f"Bearer {server.required_key}":
                    reply = Reply(401, f"Incorrect API key provided: {auth.removeprefix('Bearer ')}")
                elif reply.status == 200 and body.get("model") != server.model:
                    reply = Reply(404, f"The model `{body.get('model')}` does not exist.")
                if reply.status == 200:
                    payload = server._answer(body)
                else:
                    payload = {"error": {"message": reply.message or "scripted failure",
                                         "type": "error", "code": reply.status}}
                data = json.dumps(payload).encode()
                try:
                    self.send_response(reply.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for name, value in reply.headers.items():
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout tests)

        return Handler


def run_in_threads(count: int, target: Callable[[int], Any]) -> list[Any]:
    """Call `target(i)` from `count` threads at once; return the results in order."""
    results: list[Any] = [None] * count

    def work(i: int):
        results[i] = target(i)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results
