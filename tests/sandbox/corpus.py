"""The hostile corpus: scripts with their expected outcome in a comment header (see hostile/README.md)."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path

HOSTILE_DIR = Path(__file__).parent / "hostile"
_INTS = {
    "returncode", "signal", "min_stdout_bytes", "max_stdout_chars", "timeout_s", "memory_mb", "cpus",
    "disk_mb", "max_files", "file_size_mb", "nofile", "nproc", "output_limit_bytes",
    "output_head_bytes", "output_tail_bytes",
}


@dataclass(frozen=True)
class Case:
    name: str
    source: str
    why: str
    expect: dict = field(default_factory=dict)
    limits: dict = field(default_factory=dict)
    requires: frozenset = frozenset()


def _value(key: str, raw: str):
    if raw == "none":
        return None
    if raw in ("true", "false"):
        return raw == "true"
    if key in _INTS:
        return int(raw)
    if key.startswith("max_") or key.endswith("_s"):
        return float(raw)
    return raw


def _pairs(text: str) -> dict:
    out = {}
    for token in shlex.split(text):
        key, sep, raw = token.partition("=")
        if not sep:
            raise ValueError(f"expected key=value, got {token!r}")
        out[key] = _value(key, raw)
    return out


def parse(path: Path) -> Case:
    source = path.read_text(encoding="utf-8")
    why, expect, limits, requires = "", {}, {}, set()
    for line in source.splitlines():
        if not line.startswith("#"):
            break
        key, _, rest = line[1:].strip().partition(":")
        if key == "why":
            why = rest.strip()
        elif key == "expect":
            expect.update(_pairs(rest))
        elif key == "limits":
            limits.update(_pairs(rest))
        elif key == "requires":
            requires.update(rest.split())
    if not expect:
        raise ValueError(f"{path.name} has no `# expect:` header")
    return Case(path.stem, source, why, expect, limits, frozenset(requires))


def load_cases() -> list[Case]:
    return [parse(p) for p in sorted(HOSTILE_DIR.glob("*.py"))]
