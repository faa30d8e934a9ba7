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


def test_duplicate_ids_are_refused_for_that_id_only(tmp_path):
    folder = write_task(tmp_path / "a", "titanic")
    registry = TaskRegistry(task_dirs=[tmp_path / "a"], mlebench=False)
    with pytest.raises(TaskSpecError, match="'titanic' is already defined by"):
        registry.get("titanic")
    assert "titanic" not in registry.ids() and registry.get("penguins").id == "penguins"
    [broken] = registry.broken
    assert broken.folder == folder and "ids must be unique" in broken.error


def test_a_malformed_task_folder_is_listed_as_broken_and_the_others_work(tmp_path):
    write_task(tmp_path / "mine", "good")
    bad = write_task(tmp_path / "mine", "bad")
    (bad / "task.yaml").write_text((bad / "task.yaml").read_text().replace("metric: accuracy", "metric: f7"))
    (tmp_path / "mine" / "worse").mkdir()
    (tmp_path / "mine" / "worse" / "task.yaml").write_text("id: [unclosed\n")
    registry = TaskRegistry(task_dirs=[tmp_path / "mine"], data_dir=tmp_path / "d", mlebench=False)
    assert registry.get("good").kind == "folder" and "good" in registry.ids()
    assert [(b.name, b.folder) for b in registry.broken] == [("bad", bad), ("worse", tmp_path / "mine" / "worse")]
    assert "key `metric`: got 'f7'" in registry.broken[0].error
    assert "not valid YAML" in registry.broken[1].to_dict()["error"]
    with pytest.raises(TaskSpecError, match="got 'f7'"):  # asked for by its folder's name
        registry.get("bad")
    with pytest.raises(TaskNotFound, match="2 task folder\\(s\\) could not be loaded: .*got 'f7'"):
        registry.get("nope")


def test_unknown_task_and_missing_folder(tmp_path):
    registry = TaskRegistry(data_dir=tmp_path, mlebench=False)
    with pytest.raises(TaskNotFound, match="no task 'nope'; known tasks: .*titanic"):
        registry.get("nope")
    with pytest.raises(TaskNotFound, match="does not exist"):
        TaskRegistry(task_dirs=[tmp_path / "missing"], mlebench=False)


def test_data_root_from_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("MLEFORGE_DATA", str(tmp_path / "root"))
    assert TaskRegistry(mlebench=False).get("titanic").data_dir == (tmp_path / "root" / "titanic")


def test_hints_name_the_tasks_dir_and_data_dir_a_task_came_from(tmp_path):
    from mleforge.errors import DataNotPrepared

    folder = write_task(tmp_path / "mine", "tiny-a")
    (folder / "leaderboard.csv").unlink()
    task = TaskRegistry(task_dirs=[tmp_path / "mine"], data_dir=tmp_path / "data", mlebench=False).get("tiny-a")
    with pytest.raises(DataNotPrepared, match=(
            f"build it with: mleforge tasks leaderboard tiny-a --tasks-dir {folder} --data-dir {tmp_path / 'data'}$")):
        task.leaderboard()
