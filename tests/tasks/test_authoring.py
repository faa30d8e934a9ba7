"""The task-author API (mleforge.tasks.authoring): task folders written against it prepare,
and one written against its old name (mleforge.tasks.preparing) still does, with a warning."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pandas as pd
import pytest

from mleforge.tasks import authoring
from mleforge.tasks.preparation import prepare
from mleforge.tasks.registry import TaskRegistry

ROOT = Path(__file__).resolve().parents[2]

TASK_YAML = """\
id: {id}
name: Wine cultivar
description: description.md
modality: tabular
problem: multiclass
metric: accuracy
preparer: prepare:prepare
target: cultivar
submission:
  id_column: id
  target_columns: [cultivar]
limits: {{timeout_s: 60, memory_mb: 1024, cpus: 1}}
"""

# What docs/guide/task-api.md shows: a task prepared from a bundled scikit-learn set.
DOCUMENTED = '''\
from mleforge.tasks.authoring import PreparationError, numbered_split, sklearn_dataset, write_split

FEATURES = ["alcohol", "malic_acid", "color_intensity", "proline"]


def prepare(raw, public, private):
    frame = sklearn_dataset("wine").rename(columns={"target": "cultivar"})
    if len(frame) != 178:
        raise PreparationError(f"expected scikit-learn's 178 wines, got {len(frame)}")
    train, test = numbered_split(frame[[*FEATURES, "cultivar"]], "id", test_fraction=0.25, seed=7,
                                 stratify="cultivar")
    write_split(public, private, train, test, id_column="id", target="cultivar", features=FEATURES, sample=0)
'''

# The line of the issue: a task folder written before the helpers moved.
OLD_NAME = '''\
from mleforge.tasks.preparing import shuffled, split_frame, write_csv
from mleforge.tasks.authoring import sklearn_dataset


def prepare(raw, public, private):
    frame = shuffled(sklearn_dataset("wine").rename(columns={"target": "cultivar"}), seed=1)
    frame.insert(0, "id", range(len(frame)))
    train, test = split_frame(frame, 0.25, seed=7)
    write_csv(train, public / "train.csv")
    write_csv(test.drop(columns="cultivar"), public / "test.csv")
    write_csv(test[["id"]].assign(cultivar=0), public / "sample_submission.csv")
    write_csv(test[["id", "cultivar"]], private / "answers.csv")
'''


def task_folder(root: Path, task_id: str, prepare_py: str) -> Path:
    folder = root / task_id
    folder.mkdir(parents=True)
    (folder / "task.yaml").write_text(TASK_YAML.format(id=task_id))
    (folder / "prepare.py").write_text(prepare_py)
    (folder / "description.md").write_text("# Wine\nPredict the cultivar (0, 1, 2) of each wine.\n")
    (folder / "leaderboard.csv").write_text("score\n1.0\n0.95\n0.9\n0.4\n")
    return folder


def registry_of(tmp_path: Path) -> TaskRegistry:
    return TaskRegistry(task_dirs=[tmp_path / "tasks"], include_builtin=False, data_dir=tmp_path / "data",
                        mlebench=False)


def test_a_task_written_against_the_documented_api_prepares(tmp_path):
    task_folder(tmp_path / "tasks", "wine", DOCUMENTED)
    task = registry_of(tmp_path).get("wine")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the documented API warns about nothing
        assert prepare(task).status == "prepared"
    public, private = task.public_dir, task.private_dir
    train, test = pd.read_csv(public / "train.csv"), pd.read_csv(public / "test.csv")
    answers = pd.read_csv(private / "answers.csv")
    # 178 wines, a quarter (ceil) to the test part, numbered 1..n after a seeded shuffle
    assert (len(train), len(test)) == (133, 45)
    assert list(train["id"]) == list(range(1, 134)) and list(test["id"]) == list(range(134, 179))
    assert list(test.columns) == ["id", "alcohol", "malic_acid", "color_intensity", "proline"]
    assert list(answers.columns) == ["id", "cultivar"] and list(answers["id"]) == list(test["id"])
    # stratified: each cultivar's share of the test part is its share of the whole (59, 71, 48 of 178)
    assert answers["cultivar"].value_counts().sort_index().tolist() == [15, 18, 12]
    sample = pd.read_csv(public / "sample_submission.csv")
    assert list(sample.columns) == ["id", "cultivar"] and set(sample["cultivar"]) == {0}


def test_the_old_module_name_still_prepares_with_a_deprecation_warning(tmp_path):
    task_folder(tmp_path / "tasks", "old-wine", OLD_NAME)
    task = registry_of(tmp_path).get("old-wine")
    with pytest.warns(DeprecationWarning, match="mleforge.tasks.preparing is deprecated.*mleforge.tasks.authoring"):
        assert prepare(task).status == "prepared"
    assert len(pd.read_csv(task.private_dir / "answers.csv")) == 45


def test_a_task_authors_deprecation_shows_without_pytest(tmp_path):
    """Python hides DeprecationWarnings outside __main__; mleforge shows those a task's own file
    runs into, pointing at its line."""
    folder = task_folder(tmp_path / "tasks", "old-wine", OLD_NAME)
    code = textwrap.dedent(f"""
        from mleforge.tasks.preparation import prepare
        from mleforge.tasks.registry import TaskRegistry
        registry = TaskRegistry(task_dirs=[{str(tmp_path / 'tasks')!r}], include_builtin=False,
                                data_dir={str(tmp_path / 'data')!r}, mlebench=False)
        print(prepare(registry.get("old-wine")).status)
    """)
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT / "src")}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "prepared"
    assert f"{folder / 'prepare.py'}:1: DeprecationWarning: mleforge.tasks.preparing is deprecated" in done.stderr


def test_an_unknown_old_name_says_where_the_api_is():
    import mleforge.tasks.preparing as old

    with pytest.raises(AttributeError, match="the task-author API is mleforge.tasks.authoring"):
        old.numbered_split  # noqa: B018


def test_every_exported_name_is_documented():
    page = (ROOT / "docs" / "guide" / "task-api.md").read_text()
    documented = set(re.findall(r"^### `(\w+)", page, flags=re.MULTILINE))
    assert documented == set(authoring.__all__)
    assert all(getattr(authoring, name).__doc__ for name in authoring.__all__)
