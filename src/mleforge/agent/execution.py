"""What the agent is shown of one run of its script, trimmed head and tail.

Like every agent record it is a frozen dataclass with `to_dict`/`from_dict`, and
`from_dict(to_dict(x)) == x` exactly after a JSON round trip (fields.py says why).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mleforge.agent.fields import read_field, read_number


def trim_head_tail(text: str, head: int, tail: int) -> str:
    """`text` if it fits in head + tail characters, else its first `head` and last
    `tail` characters around a line saying how much was left out. Errors tend to
    be at the end of an output and set-up information at its start."""
    if head < 0 or tail < 0:
        raise ValueError("head and tail must be >= 0")
    if len(text) <= head + tail:
        return text
    omitted = len(text) - head - tail
    end = text[len(text) - tail:] if tail else ""
    return f"{text[:head]}\n[... {omitted} characters omitted ...]\n{end}"


@dataclass(frozen=True)
class ExecutionSummary:
    """What the agent is shown of one run of its script.

    The sandbox's ExecutionResult maps onto it field by field (see
    `from_result`); stdout and stderr are already capped head+tail there.
    """

    returncode: int | None  # None when the process never exited by itself (killed)
    timed_out: bool
    killed_by: str | None  # e.g. "timeout", "memory": which limit ended the run
    wall_s: float
    stdout: str
    stderr: str
    submission_written: bool  # the script left ./submission/submission.csv
    isolation: str | None = None  # the sandbox's: "bwrap" or "none" (None: not recorded)

    @property
    def succeeded(self) -> bool:
        """The process exited 0 by itself (the submission may still be invalid)."""
        return self.returncode == 0 and not self.timed_out and self.killed_by is None

    @classmethod
    def from_result(cls, result: Any, max_chars: int | None = None) -> ExecutionSummary:
        """Convert anything with the sandbox's ExecutionResult attributes
        (returncode, timed_out, killed_by, wall_s, stdout, stderr, submission_path),
        trimming each output to `max_chars` (half head, half tail) when given."""

        def text(value: Any) -> str:
            value = value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value or "")
            if max_chars is not None:
                value = trim_head_tail(value, max_chars // 2, max_chars - max_chars // 2)
            return value

        return cls(
            returncode=None if result.returncode is None else int(result.returncode),
            timed_out=bool(result.timed_out),
            killed_by=getattr(result, "killed_by", None),
            wall_s=float(result.wall_s),
            stdout=text(result.stdout),
            stderr=text(result.stderr),
            submission_written=getattr(result, "submission_path", None) is not None,
            isolation=getattr(result, "isolation", None),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "returncode": self.returncode,
            "timed_out": self.timed_out,
            "killed_by": self.killed_by,
            "wall_s": self.wall_s,
            "stdout": self.stdout,
            "stderr": self.stderr,
            "submission_written": self.submission_written,
            "isolation": self.isolation,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ExecutionSummary:
        what = "execution"
        return cls(
            returncode=read_field(data, "returncode", (int,), what, optional=True),
            timed_out=read_field(data, "timed_out", (bool,), what),
            killed_by=read_field(data, "killed_by", (str,), what, optional=True),
            wall_s=read_number(data, "wall_s", what),  # type: ignore[arg-type]
            stdout=read_field(data, "stdout", (str,), what),
            stderr=read_field(data, "stderr", (str,), what),
            submission_written=read_field(data, "submission_written", (bool,), what),
            isolation=read_field(data, "isolation", (str,), what, optional=True),
        )

    def content(self) -> dict[str, Any]:
        """What a prompt may show of the run: everything but the wall time, which
        differs between two runs of the same script, and the isolation, which is the
        executor's, not the script's."""
        data = self.to_dict()
        del data["wall_s"]
        del data["isolation"]
        return data
