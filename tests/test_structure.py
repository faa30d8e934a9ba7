"""The package's shape as DESIGN.md draws it: imports point down the layers, no module
imports itself back through others (lazy imports inside functions included), and files and
functions small enough to read. A new module that breaks one of these fails here with the
names to look at."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "mleforge"

# DESIGN.md's layers, bottom up: a package may import its own modules, any package of a lower
# rank, and a peer of its own rank as long as no two packages import each other (train may
# call eval; eval never imports train; nothing imports cli).
LAYERS = {
    "errors": 0, "paths": 0, "utils": 0, "config": 0, "runs": 0,
    "tasks": 1,
    "sandbox": 2, "grading": 2,
    "policies": 3, "reference": 3, "reward": 3,
    "agent": 4,
    "curriculum": 5, "expert": 5,
    "eval": 6,
    "train": 7,
    "cli": 8, "__main__": 9,
}
MAX_FILE_LINES = 600
MAX_FUNCTION_LINES = 60


def modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """The mleforge modules `name` imports anywhere in its file (the longest known prefix)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [base] + [f"{base}.{a.name}" for a in node.names]
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name and target.startswith("mleforge"):
                found.add(target)
    return found


def graph() -> dict[str, set[str]]:
    mods = modules()
    known = set(mods)
    return {name: imports_of(name, path, known) for name, path in mods.items()}


def layer(name: str) -> tuple[str, int] | None:
    parts = name.split(".")
    if len(parts) < 2:
        return None
    return parts[1], LAYERS.get(parts[1], -1)


def upward_imports() -> list[str]:
    out = []
    for name, targets in graph().items():
        src = layer(name)
        for target in targets:
            dst = layer(target)
            if src is None or dst is None or src[0] == dst[0]:
                continue
            if dst[1] > src[1]:
                out.append(f"{name} -> {target}")
    return sorted(out)


def cycles() -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), package __init__
    re-exports left out: an __init__ that gathers its package's names is not a circle."""
    edges = {n: {t for t in ts if not (n.startswith(t + ".") and t == n.rpartition(".")[0])}
             for n, ts in graph().items()}
    edges = {n: {t for t in ts if modules_is_init(t) is False or not n.startswith(t + ".")} for n, ts in edges.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return sorted(out)


_INITS = {n for n, p in modules().items() if p.name == "__init__.py"}


def modules_is_init(name: str) -> bool:
    return name in _INITS


def long_files() -> list[str]:
    out = []
    for name, path in modules().items():
        n = len(path.read_text(encoding="utf-8").splitlines())
        if n > MAX_FILE_LINES:
            out.append(f"{name}: {n} lines")
    return out


def long_functions() -> list[str]:
    out = []
    for name, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    out.append(f"{name}.{node.name}: {n} lines")
    return sorted(out)


def package_cycles() -> list[str]:
    """Pairs of packages that import each other (peers of one rank included)."""
    pairs = set()
    for name, targets in graph().items():
        for target in targets:
            a, b = layer(name), layer(target)
            if a and b and a[0] != b[0]:
                pairs.add((a[0], b[0]))
    return sorted(f"{a} <-> {b}" for a, b in pairs if (b, a) in pairs and a < b)


@pytest.mark.parametrize("check", [upward_imports, cycles, package_cycles, long_files, long_functions])
def test_structure(check):
    assert check() == []


if __name__ == "__main__":  # the counts the structure issue's note reports
    for check in (upward_imports, cycles, package_cycles, long_files, long_functions):
        found = check()
        print(f"{check.__name__}: {len(found)}")
        for line in found:
            print("   ", line)
