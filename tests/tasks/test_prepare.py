"""Preparation: deterministic, verified, redone when corrupted or half-written, never used then."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from mleforge.errors import DataNotPrepared, PreparationError
from mleforge.tasks.preparation import MANIFEST, prepare, require_prepared, verify
from mleforge.tasks.registry import TaskRegistry
from tests.tasks.helpers import PREPARE, write_task


@pytest.fixture
def tiny(tmp_path):
    write_task(tmp_path / "tasks")
    registry = TaskRegistry(task_dirs=[tmp_path / "tasks"], include_builtin=False,
                            data_dir=tmp_path / "data", mlebench=False)
    return registry.get("tiny")


def test_prepare_then_skip_when_intact(tiny):
    first = prepare(tiny)
    assert first.status == "prepared" and first.reason == "not prepared"
    assert verify(tiny) is None
    assert prepare(tiny).status == "verified"
    manifest = json.loads((tiny.data_dir / "prepared" / MANIFEST).read_text())
    assert set(manifest["files"]) == {
        "public/train.csv", "public/test.csv", "public/sample_submission.csv",
        "public/description.md", "private/answers.csv",
        # Written by the preparation: the public and private parts of the answers.
        "private/public_answers.csv", "private/private_answers.csv",
    }
    assert manifest["rows"] == {"train": 4, "test": 4}
    assert prepare(tiny, force=True).reason == "forced"


@pytest.mark.parametrize(
    "damage, problem",
    [
        (lambda p: (p / "public" / "train.csv").write_text("id,x,y\n1,0,0\n"), "wrong size"),
        (lambda p: (p / "private" / "answers.csv").unlink(), "missing file private/answers.csv"),
        (lambda p: (p / "public" / "extra.txt").write_text("?"), "unexpected file public/extra.txt"),
        (lambda p: (p / MANIFEST).write_text("{not json"), "unreadable manifest"),
        (lambda p: (p / MANIFEST).unlink(), "no manifest"),
    ],
)
def test_damage_is_detected_refused_and_repaired(tiny, damage, problem):
    prepare(tiny)
    damage(tiny.data_dir / "prepared")
    assert problem in verify(tiny)
    with pytest.raises(DataNotPrepared, match="mleforge tasks prepare tiny"):
        require_prepared(tiny)
    result = prepare(tiny)
    assert result.status == "prepared" and problem in result.reason
    assert verify(tiny) is None


def test_same_size_bit_flip_is_detected(tiny):
    prepare(tiny)
    path = tiny.data_dir / "prepared" / "private" / "answers.csv"
    data = bytearray(path.read_bytes())
    data[-2] = ord("0") if data[-2] == ord("1") else ord("1")
    path.write_bytes(bytes(data))
    os.utime(path)
    assert "wrong checksum" in verify(tiny)


def test_definition_change_triggers_preparation(tiny):
    prepare(tiny)
    (tiny.spec.folder / "description.md").write_text("# Tiny\nNew words.\n")
    assert verify(tiny) == "the task definition changed since it was prepared"
    assert prepare(tiny).status == "prepared"


def test_killed_preparer_leaves_nothing_usable(tiny, tmp_path):
    """SIGKILL a preparer half-way: the old preparation is gone or intact, never half-written."""
    (tiny.spec.folder / "prepare.py").write_text(PREPARE.replace(
        'private / "answers.csv", index=False)',
        'private / "answers.csv", index=False)\n    import time; print("ready", flush=True); time.sleep(60)'))
    code = textwrap.dedent(f"""
        from mleforge.tasks.registry import TaskRegistry
        from mleforge.tasks.preparation import prepare
        r = TaskRegistry(task_dirs=[{str(tiny.spec.folder.parent)!r}], include_builtin=False,
                         data_dir={str(tiny.data_dir.parent)!r}, mlebench=False)
        prepare(r.get("tiny"))
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert list(tiny.data_dir.glob(".staging-*"))  # the half-written folder is there...
    assert verify(tiny) == "not prepared"  # ...but never taken for a preparation
    (tiny.spec.folder / "prepare.py").write_text(PREPARE)
    assert prepare(tiny).status == "prepared"
    assert not list(tiny.data_dir.glob(".staging-*"))


def test_processes_preparing_one_task_at_once_prepare_it_once(tiny):
    """The ranks of a multi-process run (or any two commands) preparing the same task: one
    prepares it, the others wait and find it prepared; nothing is half-written or prepared twice."""
    marks = tiny.data_dir.parent / "preparer-ran"
    (tiny.spec.folder / "prepare.py").write_text(PREPARE.replace(
        'private / "answers.csv", index=False)',
        f'private / "answers.csv", index=False)\n    import os, time\n'
        f'    open({str(marks)!r}, "a").write(str(os.getpid()) + "\\n"); time.sleep(1)'))
    code = textwrap.dedent(f"""
        from mleforge.tasks.registry import TaskRegistry
        from mleforge.tasks.preparation import prepare
        r = TaskRegistry(task_dirs=[{str(tiny.spec.folder.parent)!r}], include_builtin=False,
                         data_dir={str(tiny.data_dir.parent)!r}, mlebench=False)
        print(prepare(r.get("tiny")).status)
    """)
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True) for _ in range(2)]
    statuses = sorted(p.communicate(timeout=120)[0].strip() for p in procs)
    assert [p.returncode for p in procs] == [0, 0]
    assert statuses == ["prepared", "verified"]
    assert len(marks.read_text().splitlines()) == 1
    assert verify(tiny) is None and not list(tiny.data_dir.glob(".staging-*"))


def test_preparer_that_leaks_answers_is_refused(tiny):
    (tiny.spec.folder / "prepare.py").write_text(PREPARE + textwrap.dedent('''
        _original = prepare
        def prepare(raw, public, private):
            _original(raw, public, private)
            (public / "answers_copy.csv").write_bytes((private / "answers.csv").read_bytes())
    '''))
    with pytest.raises(PreparationError, match="copy of private/answers.csv under public"):
        prepare(tiny)
    assert verify(tiny) == "not prepared"


def test_preparer_that_leaves_target_in_test_is_refused(tiny):
    (tiny.spec.folder / "prepare.py").write_text(PREPARE.replace(
        '"x": [0.3, 0.7, 0.1, 0.95]}', '"x": [0.3, 0.7, 0.1, 0.95], "y": [0, 1, 0, 1]}'))
    with pytest.raises(PreparationError, match=r"target column\(s\) \['y'\] in public/test.csv"):
        prepare(tiny)


def test_preparer_missing_a_file_is_refused(tiny):
    (tiny.spec.folder / "prepare.py").write_text(PREPARE.replace(
        'pd.DataFrame({"id": [5, 6, 7, 8], "y": [0, 1, 0, 1]}).to_csv(private / "answers.csv", index=False)', "pass"))
    with pytest.raises(PreparationError, match="did not write private/answers.csv"):
        prepare(tiny)


def test_preparer_that_leaves_target_renamed_in_test_is_refused(tiny):
    (tiny.spec.folder / "prepare.py").write_text(PREPARE.replace(
        '"x": [0.3, 0.7, 0.1, 0.95]}', '"x": [0.3, 0.7, 0.1, 0.95], "label": [0, 1, 0, 1]}'))
    with pytest.raises(PreparationError, match=r"under another name: 'label' \(the answers' 'y'\)"):
        prepare(tiny)
    assert verify(tiny) == "not prepared"


def test_no_lock_file_is_left_after_a_failed_or_a_good_preparation(tiny, tmp_path):
    failing = write_task(tmp_path / "more", "tiny-fail")
    (failing / "prepare.py").write_text("def prepare(raw, public, private):\n    raise RuntimeError('boom')\n")
    task = TaskRegistry(task_dirs=[tmp_path / "more"], include_builtin=False,
                        data_dir=tmp_path / "data", mlebench=False).get("tiny-fail")
    with pytest.raises(RuntimeError, match="boom"):
        prepare(task)
    assert not (task.data_dir / ".lock").exists() and not list(task.data_dir.glob(".staging-*"))
    assert prepare(tiny).status == "prepared"
    assert not (tiny.data_dir / ".lock").exists()


def test_not_prepared_hint_repeats_the_tasks_folder(tiny):
    with pytest.raises(DataNotPrepared) as info:
        require_prepared(tiny)
    assert str(info.value).endswith(f"run: mleforge tasks prepare tiny --tasks-dir {tiny.spec.folder} "
                                    f"--data-dir {tiny.data_dir.parent}")


def test_a_preparer_may_not_write_the_parts_itself(tiny):
    (tiny.spec.folder / "prepare.py").write_text(PREPARE + textwrap.dedent('''
        _original = prepare
        def prepare(raw, public, private):
            _original(raw, public, private)
            (private / "public_answers.csv").write_text("id,y\\n5,0\\n")
    '''))
    with pytest.raises(PreparationError, match="the preparation writes those itself"):
        prepare(tiny)
