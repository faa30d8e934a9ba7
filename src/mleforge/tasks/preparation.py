"""Deterministic, verified, atomic preparation of a task's data.

`<root>/<id>/prepared/` holds `public/`, `private/` and `manifest.json` (the
sha256 and size of every file, and a hash of the task definition it was made
from). A preparation is built in a temporary sibling folder and renamed into
place only when complete, so a killed preparer leaves nothing that looks
finished. `verify` rejects anything the manifest does not vouch for.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import threading
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from mleforge import __version__
from mleforge.errors import DataNotPrepared, PreparationError
from mleforge.tasks.loading import load_callable
from mleforge.tasks.task import Task, cli_task_args

if TYPE_CHECKING:
    import pandas as pd

MANIFEST = "manifest.json"
REQUIRED_PUBLIC = ("train.csv", "test.csv", "sample_submission.csv", "description.md")
REQUIRED_PRIVATE = ("answers.csv",)
# Written by the preparation itself, after the preparer: Kaggle's public/private split of
# answers.csv (which stays whole, as MLE-bench's private/answers.csv is the whole test set).
PUBLIC_ANSWERS = "public_answers.csv"
PRIVATE_ANSWERS = "private_answers.csv"
# Bumped when what the preparation adds to a preparer's output changes, so existing
# preparations are redone (2: the public/private split of the answers).
PREPARATION_VERSION = 2
# Verified preparations, keyed by (manifest path, its mtime and size, definition hash):
# a hot path (every execution, every grade) re-verifies only after something changed.
_verified: set[tuple[str, int, int, str]] = set()
_verified_lock = threading.Lock()


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def definition_hash(task: Task) -> str:
    """A hash of the files that define the data: task.yaml, the preparer and the description."""
    folder = task.spec.folder
    digest = hashlib.sha256(f"preparation {PREPARATION_VERSION}\0".encode())
    names = ["task.yaml", task.spec.description_path.name]
    module = task.spec.preparer.split(":")[0]
    local = folder.joinpath(*module.split(".")).with_suffix(".py")
    for path in [folder / n for n in names] + ([local] if local.is_file() else []):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    if not local.is_file():
        digest.update(task.spec.preparer.encode())
    return digest.hexdigest()


@dataclass(frozen=True)
class PrepareResult:
    task_id: str
    status: str  # "prepared" | "verified" (already there and intact)
    prepared_dir: Path
    reason: str = ""  # why it was (re)prepared


def _list_files(root: Path) -> list[str]:
    return sorted(
        str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() or p.is_symlink()
    )


def verify(task: Task) -> str | None:
    """None if the preparation is complete and intact, else what is wrong with it."""
    if task.kind == "mlebench":
        return verify_mlebench(task)
    prepared = task.data_dir / "prepared"
    manifest_path = prepared / MANIFEST
    if not manifest_path.is_file():
        return "not prepared" if not prepared.exists() else "no manifest (half-written or foreign)"
    try:
        manifest = json.loads(manifest_path.read_text())
        files: dict[str, dict] = manifest["files"]
        recorded_definition = manifest["definition_sha256"]
    except (ValueError, KeyError, TypeError) as exc:
        return f"unreadable manifest ({exc})"
    current_definition = definition_hash(task)
    if recorded_definition != current_definition:
        return "the task definition changed since it was prepared"
    stat = manifest_path.stat()
    key = (str(manifest_path), stat.st_mtime_ns, stat.st_size, current_definition)
    with _verified_lock:
        if key in _verified:
            return None
    on_disk = [f for f in _list_files(prepared) if f != MANIFEST]
    extra = sorted(set(on_disk) - set(files))
    if extra:
        return f"unexpected file {extra[0]}"
    for rel, meta in files.items():
        path = prepared / rel
        if not path.is_file() or path.is_symlink():
            return f"missing file {rel}"
        if path.stat().st_size != meta["size"]:
            return f"{rel} has the wrong size"
        if sha256_file(path) != meta["sha256"]:
            return f"{rel} has the wrong checksum"
    with _verified_lock:
        _verified.add(key)
    return None


def require_prepared(task: Task) -> None:
    """Raise `DataNotPrepared` (naming the command to run) unless the data is intact."""
    problem = verify(task)
    if problem:
        raise DataNotPrepared(
            f"data of task {task.id} is not usable ({problem}); "
            f"run: mleforge tasks prepare {task.id}{cli_task_args(task, data_dir=True)}"
        )


def read_public(task: Task) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The prepared train and test frames of a task (verified first)."""
    import pandas as pd

    require_prepared(task)
    train = pd.read_csv(task.public_dir / "train.csv")
    test = pd.read_csv(task.public_dir / "test.csv")
    return train, test


@contextmanager
def _lock(path: Path):
    """An exclusive lock on `path`, removed when released (a failed preparation leaves no
    stale `.lock`). A waiter may have opened the file just before its holder removed it:
    it then holds a lock on a file nobody else sees, so it checks that the path still names
    the file it locked and starts over if not."""
    path.parent.mkdir(parents=True, exist_ok=True)
    while True:
        with open(path, "a+") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                same = os.stat(path).st_ino == os.fstat(handle.fileno()).st_ino
            except FileNotFoundError:
                same = False
            if not same:
                continue
            try:
                yield
            finally:
                path.unlink(missing_ok=True)
                fcntl.flock(handle, fcntl.LOCK_UN)
            return


def _check_output(task: Task, staging: Path) -> None:
    public, private = staging / "public", staging / "private"
    for name in REQUIRED_PUBLIC:
        if not (public / name).is_file():
            raise PreparationError(f"preparer of {task.id} did not write public/{name}")
    for name in REQUIRED_PRIVATE:
        if not (private / name).is_file():
            raise PreparationError(f"preparer of {task.id} did not write private/{name}")
    for path in staging.rglob("*"):
        if path.is_symlink():
            raise PreparationError(f"preparer of {task.id} wrote a symbolic link {path.relative_to(staging)}")
    public_hashes = {sha256_file(p) for p in public.rglob("*") if p.is_file()}
    for path in private.rglob("*"):
        if path.is_file() and sha256_file(path) in public_hashes:
            raise PreparationError(
                f"preparer of {task.id} put a copy of private/{path.relative_to(private)} under public/"
            )
    import pandas as pd

    test_columns = set(pd.read_csv(public / "test.csv", nrows=0).columns)
    leaked = set(task.spec.submission.target_columns) & test_columns
    if task.spec.target:
        leaked |= {task.spec.target} & test_columns
    if leaked:
        raise PreparationError(
            f"preparer of {task.id} left the target column(s) {sorted(leaked)} in public/test.csv"
        )
    from mleforge.tasks.leaks import renamed_target_columns

    fmt = task.spec.submission
    try:
        renamed = renamed_target_columns(pd.read_csv(public / "test.csv"), pd.read_csv(private / "answers.csv"),
                                         fmt.id_column, fmt.target_columns)
    except pd.errors.MergeError as exc:
        raise PreparationError(
            f"preparer of {task.id} wrote ids that repeat in public/test.csv or private/answers.csv ({exc}); "
            "each test id must appear once in each"
        ) from None
    if renamed:
        pairs = ", ".join(f"{test!r} (the answers' {target!r})" for test, target in renamed)
        raise PreparationError(
            f"preparer of {task.id} left the answers in public/test.csv under another name: {pairs}; "
            "drop those columns from the test file"
        )


def _split_answers(task: Task, private: Path) -> None:
    """Write the public and private parts of answers.csv (tasks.answer_split), in its row order."""
    import pandas as pd

    from mleforge.tasks.answer_split import split_answers

    if (private / PUBLIC_ANSWERS).exists() or (private / PRIVATE_ANSWERS).exists():
        raise PreparationError(
            f"preparer of {task.id} wrote private/{PUBLIC_ANSWERS} or private/{PRIVATE_ANSWERS}; "
            "the preparation writes those itself from private/answers.csv"
        )
    fmt = task.spec.submission
    answers = pd.read_csv(private / "answers.csv", dtype=str, keep_default_na=False)
    # Read as text: the parts hold the answers' values exactly as the preparer wrote them.
    public, private_part = split_answers(answers, fmt.id_column, fmt.target_columns, task.spec.problem, task.id)
    public.to_csv(private / PUBLIC_ANSWERS, index=False)
    private_part.to_csv(private / PRIVATE_ANSWERS, index=False)


def prepare(task: Task, force: bool = False) -> PrepareResult:
    """Prepare a task's data unless an intact preparation of the same definition exists."""
    if task.kind == "mlebench":
        problem = verify_mlebench(task)
        if problem:
            raise DataNotPrepared(
                f"MLE-bench competition {task.id} is not prepared ({problem}); "
                f"run: mlebench prepare -c {task.id.removeprefix('mlebench:')}"
            )
        return PrepareResult(task.id, "verified", task.data_dir / "prepared")
    prepared = task.data_dir / "prepared"
    with _lock(task.data_dir / ".lock"):
        problem = verify(task)
        if problem is None and not force:
            return PrepareResult(task.id, "verified", prepared)
        reason = "forced" if problem is None else problem
        # Under the lock no other preparer runs here: any staging folder is a killed one's.
        for stale in task.data_dir.glob(".staging-*"):
            shutil.rmtree(stale, ignore_errors=True)
        preparer = load_callable(task.spec.preparer, task.spec.folder, task.spec.folder / "task.yaml", "preparer")
        staging = task.data_dir / f".staging-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        try:
            (staging / "public").mkdir(parents=True)
            (staging / "private").mkdir()
            raw = task.data_dir / "raw"
            preparer(raw, staging / "public", staging / "private")
            shutil.copyfile(task.spec.description_path, staging / "public" / "description.md")
            _check_output(task, staging)
            _split_answers(task, staging / "private")
            files = {
                rel: {"sha256": sha256_file(staging / rel), "size": (staging / rel).stat().st_size}
                for rel in _list_files(staging)
            }
            manifest = {
                "task_id": task.id,
                "rows": {
                    split: _count_rows(staging / "public" / f"{split}.csv") for split in ("train", "test")
                },
                "definition_sha256": definition_hash(task),
                "mleforge_version": __version__,
                "created_at": datetime.now(timezone.utc).isoformat(),
                "files": files,
            }
            manifest_tmp = staging / f"{MANIFEST}.tmp"
            manifest_tmp.write_text(json.dumps(manifest, indent=2, sort_keys=True))
            os.replace(manifest_tmp, staging / MANIFEST)
            _fsync_tree(staging)
            if prepared.exists():
                trash = task.data_dir / f".trash-{uuid.uuid4().hex[:8]}"
                os.replace(prepared, trash)
                shutil.rmtree(trash, ignore_errors=True)
            os.replace(staging, prepared)
        finally:
            if staging.exists():
                shutil.rmtree(staging, ignore_errors=True)
        for stale in task.data_dir.glob(".trash-*"):
            shutil.rmtree(stale, ignore_errors=True)
        return PrepareResult(task.id, "prepared", prepared, reason)


def _count_rows(path: Path) -> int:
    import pandas as pd

    return int(len(pd.read_csv(path, usecols=[0])))


def read_manifest(task: Task) -> dict | None:
    """The manifest of an intact preparation, else None."""
    if task.kind == "mlebench" or verify(task) is not None:
        return None
    return json.loads((task.data_dir / "prepared" / MANIFEST).read_text())


def _fsync_tree(root: Path) -> None:
    for path in root.rglob("*"):
        if path.is_file():
            with open(path, "rb") as f:
                os.fsync(f.fileno())


def verify_mlebench(task: Task) -> str | None:
    """MLE-bench's own readiness rule: non-empty public and private dirs and the answers file."""
    for folder in (task.public_dir, task.private_dir):
        if not folder.is_dir() or not any(folder.iterdir()):
            return f"{folder} is missing or empty"
    if not task.answers_path.is_file():
        return f"answers file {task.answers_path} is missing"
    return None
