"""Capturing a stream that may be empty or gigabytes long: keep the head and the tail."""

from __future__ import annotations


class CappedCapture:
    """The first `head` and last `tail` bytes of a stream, and how many bytes it had.

    Memory stays bounded by head + 2 * tail however much the script writes; the
    middle is replaced by a line saying how much was left out.
    """

    def __init__(self, head: int, tail: int):
        self.head_limit = head
        self.tail_limit = tail
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def feed(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.head_limit - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk and self.tail_limit:
            self.tail += chunk
            # Trim lazily: a copy per chunk would make a flood quadratic.
            if len(self.tail) > 2 * self.tail_limit:
                del self.tail[: len(self.tail) - self.tail_limit]

    def text(self) -> str:
        tail = bytes(self.tail[-self.tail_limit :]) if self.tail_limit else b""
        omitted = self.total - len(self.head) - len(tail)
        if omitted <= 0:
            return (bytes(self.head) + tail).decode("utf-8", errors="replace")
        marker = f"\n[... {omitted} bytes omitted ...]\n"
        return (
            bytes(self.head).decode("utf-8", errors="replace")
            + marker
            + tail.decode("utf-8", errors="replace")
        )
