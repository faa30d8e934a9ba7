"""Loading a script of benchmarks/ (not a package) as a module, for the tests of its parts."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def load_benchmark(name: str) -> ModuleType:
    """benchmarks/<name>.py, executed once per call as module `bench_<name>`, with benchmarks/
    on the import path as when the script runs (for its shared helpers, e.g. _policy_tables)."""
    if str(ROOT / "benchmarks") not in sys.path:
        sys.path.append(str(ROOT / "benchmarks"))
    spec = importlib.util.spec_from_file_location(f"bench_{name}", ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def assert_convention(record: dict, benchmark: str, script: str | None = None) -> None:
    """`record` is in benchmarks/_record.py's results convention: its benchmark, the meta of the
    command that wrote it (`python benchmarks/<script>.py ...`; script "": a part called in this
    process, whose command is the test runner's), a table whose rows fit its columns, and the
    same of any further tables."""
    assert record["benchmark"] == benchmark and list(record)[:3] == ["benchmark", "meta", "table"]
    assert set(record["meta"]) == {"command", "date", "commit", "machine"}
    assert record["meta"]["command"].startswith("python ")
    if script != "":
        assert record["meta"]["command"].startswith(f"python benchmarks/{script or benchmark}.py ")
    for shown in [record["table"], *record.get("tables", [])]:
        assert set(shown) == {"title", "columns", "rows"} and shown["title"]
        assert all(len(row) == len(shown["columns"]) for row in shown["rows"])
