"""The registry: built-in tasks, user folders (argument and environment), selections, errors."""

from __future__ import annotations

import pytest

from mleforge.errors import TaskNotFound, TaskSpecError
from mleforge.tasks.registry import TASKS_ENV, TaskRegistry
from tests.tasks.helpers import write_task


def test_builtin_and_user_folders(tmp_path, monkeypatch):
    write_task(tmp_path / "mine", "tiny-a")
    write_task(tmp_path / "mine", "tiny-b")
    single = write_task(tmp_path / "other", "tiny-c")
    monkeypatch.setenv(TASKS_ENV, str(single))
    registry = TaskRegistry(task_dirs=[tmp_path / "mine"], data_dir=tmp_path / "data", mlebench=False)
    ids = registry.ids()
    assert {"titanic", "house-prices", "tiny-a", "tiny-b", "tiny-c"} <= set(ids)
    assert registry.get("tiny-a").kind == "folder" and registry.get("titanic").kind == "builtin"
    assert registry.get("tiny-a").data_dir == (tmp_path / "data" / "tiny-a").resolve()
    assert [t.id for t in registry.select("tiny-a, tiny-c")] == ["tiny-a", "tiny-c"]
    lite = registry.select("lite")
    assert lite and all("lite" in t.spec.tags for t in lite)
    assert len(registry.select("all")) == len(ids)


def test_duplicate_ids_are_refused(tmp_path):
    write_task(tmp_path / "a", "titanic")
    with pytest.raises(TaskSpecError, match="'titanic' is already defined by"):
        TaskRegistry(task_dirs=[tmp_path / "a"], mlebench=False)


def test_unknown_task_and_missing_folder(tmp_path):
    registry = TaskRegistry(data_dir=tmp_path, mlebench=False)
    with pytest.raises(TaskNotFound, match="no task 'nope'; known tasks: .*titanic"):
        registry.get("nope")
    with pytest.raises(TaskNotFound, match="does not exist"):
        TaskRegistry(task_dirs=[tmp_path / "missing"], mlebench=False)


def test_data_root_from_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("MLEFORGE_DATA", str(tmp_path / "root"))
    assert TaskRegistry(mlebench=False).get("titanic").data_dir == (tmp_path / "root" / "titanic")
