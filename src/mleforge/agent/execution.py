"""What the agent is shown of one run of its script, trimmed head and tail.

Like every agent record it is a frozen dataclass with `to_dict`/`from_dict`, and
`from_dict(to_dict(x)) == x` exactly after a JSON round trip (fields.py says why).
"""

from __future__ import annotations

import re
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


# A Python warning as `warnings` prints it: "path:line: SomeWarning: message", then the source
# line it points at, indented.
_WARNING_RE = re.compile(r"^\S.*:\d+: \w*Warning: ")


def _units(lines: list[str]) -> list[tuple[str, ...]]:
    """The output's lines grouped: a warning and its indented source line are one unit."""
    units: list[tuple[str, ...]] = []
    i = 0
    while i < len(lines):
        if _WARNING_RE.match(lines[i]) and i + 1 < len(lines) and lines[i + 1].startswith((" ", "\t")):
            units.append((lines[i], lines[i + 1]))
            i += 2
        else:
            units.append((lines[i],))
            i += 1
    return units


def _shown_once(unit: tuple[str, ...], times: int) -> list[str]:
    if times == 1:
        return list(unit)
    if len(unit) == 1:
        return [f"{unit[0]} (repeated {times} times)"]
    return [*unit[:-1], f"{unit[-1]} (these {len(unit)} lines repeated {times} times)"]


def collapse_repeats(text: str) -> str:
    """`text` with its repetition shown once: a line repeated in a row, and every Python warning
    printed with its source line (the indented line after it) wherever it recurs, appear once
    with their count; a warning without a source line counts as a plain line (runs only).
    A library warning printed once per call can fill a whole output budget and push the
    traceback and the final score out of view; repeating it says nothing more."""
    lines = text.split("\n")
    units = _units(lines)
    counts: dict[tuple[str, ...], int] = {}
    for unit in units:
        if len(unit) == 2:
            counts[unit] = counts.get(unit, 0) + 1
    out: list[str] = []
    seen: set[tuple[str, ...]] = set()
    i = 0
    while i < len(units):
        unit = units[i]
        if len(unit) == 2:  # a warning: shown at its first occurrence, with the count of all
            if unit not in seen:
                seen.add(unit)
                out += _shown_once(unit, counts[unit])
            i += 1
            continue
        run = 1
        while i + run < len(units) and units[i + run] == unit:
            run += 1
        # A run of blank lines stays a blank line: "(repeated N times)" would be noise.
        out += [unit[0]] if not unit[0].strip() else _shown_once(unit, run)
        i += run
    return "\n".join(out)


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
