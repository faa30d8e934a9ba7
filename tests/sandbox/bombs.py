"""Submission bombs: files a hostile script can leave for the grading parent to parse.

Each costs a naive `pandas.read_csv` gigabytes or minutes (100k columns in 200 MB:
2.1 GB; 100k duplicate names: quadratic renaming, ~1 min; one 200 MB line: 7 GB);
the grader must refuse each from its bytes. Written in 1 MiB chunks, so making one
costs little memory. Shared by tests/sandbox/test_submission_bombs.py and
benchmarks/sandbox.py.
"""

from __future__ import annotations

from pathlib import Path

MIB = 1 << 20
BOMBS = ("wide", "duplicate_names", "endless_line", "many_rows", "wide_header_small")


def _write_repeated(f, unit: bytes, total: int) -> None:
    block = unit * max(1, MIB // len(unit))
    written = 0
    while written < total:
        part = block[: total - written]
        f.write(part)
        written += len(part)


def write_bomb(kind: str, path: Path, columns: tuple[str, ...], *, size_mb: int = 200) -> Path:
    """Write bomb `kind` at `path`; `columns` is the task's expected header."""
    header = ",".join(columns).encode()
    with open(path, "wb") as f:
        if kind == "wide":  # 100k columns, rows of them up to size_mb
            names = ",".join(f"c{i}" for i in range(100_000)).encode()
            f.write(header + b"," + names + b"\n")
            row = b",".join([b"1"] * (100_000 + len(columns))) + b"\n"
            _write_repeated(f, row, size_mb * MIB)
        elif kind == "duplicate_names":  # a 200 kB header of 100k names, all the same
            f.write(b",".join([columns[0].encode()] * 100_000) + b"\n1\n")
        elif kind == "endless_line":  # one line, no newline at all
            f.write(header + b",")
            _write_repeated(f, b"9", size_mb * MIB)
        elif kind == "many_rows":  # a valid header, then far more rows than test ids, small enough
            f.write(header + b"\n")
            _write_repeated(f, b"1,1\n", 4 * MIB // 5)
        elif kind == "wide_header_small":  # 20k columns in a header under the size cap
            f.write(header + b"," + ",".join(f"x{i}" for i in range(20_000)).encode() + b"\n")
        else:
            raise ValueError(f"unknown bomb {kind!r}; one of {', '.join(BOMBS)}")
    return path
