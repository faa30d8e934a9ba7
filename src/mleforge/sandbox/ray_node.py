"""The node's side of the Ray executor: what runs inside a Ray worker, on whichever node Ray picks.

    one Ray task per run (a generator)
    yield "started" (the node's id, the worker's pid)    -> the driver's clock starts
    the task's public data: this node's copy, unpacked once per checksum (a file lock,
      checked against the checksum, read-only); only the first run on a node fetches it
    LocalExecutor.run_public(): bwrap, supervisor, limits, clean-up: exactly as local
    yield the result, the submission's bytes, and whether this run shipped the data

The data folder is $MLEFORGE_RAY_DATA on the node (its environment, e.g. set where
`ray start` runs), else a folder under the node's temporary directory: node-local,
so each node holds one copy whatever the number of runs.
"""

from __future__ import annotations

import atexit
import contextlib
import io
import os
import tarfile
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from mleforge.errors import MissingExtra, SandboxError
from mleforge.sandbox.limits import RunLimits
from mleforge.sandbox.result import ExecutionResult
from mleforge.tasks.spec import DataSource

DATA_ENV = "MLEFORGE_RAY_DATA"  # where a node keeps unpacked task data
CLEAN_WAIT_S = 30.0  # how long clean_node waits for a killed worker to be gone


def ray_module():
    """Ray, or an error naming the extra that installs it."""
    try:
        import ray
    except ImportError as exc:
        raise MissingExtra("ray", "ray", "the Ray executor") from exc
    return ray


def data_root() -> Path:
    """This node's folder of unpacked task data."""
    return Path(os.environ.get(DATA_ENV) or Path(tempfile.gettempdir()) / f"mleforge-ray-data-{os.getuid()}")


def tar_of(folder: Path) -> bytes:
    """`folder` as an uncompressed tar whose one top entry is `public`."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        tar.add(folder, arcname="public")
    return buffer.getvalue()


def run_on_node(script, task_id, data_key, data_refs, limits, isolation, base_dir, keep, max_bytes, sources=()):
    """A generator task: first "started" (the driver's clock starts), then the result.
    A submission over `max_bytes` (what the grader would refuse unread) stays behind.
    `sources`: the task's declared ones (DataSource.to_dict()), hidden on the node too."""
    ray = ray_module()
    yield {"event": "started", "pid": os.getpid(), "node": ray.get_runtime_context().get_node_id()}
    public, shipped = node_data(data_key, data_refs[0])
    executor = node_executor(isolation, base_dir)
    declared = tuple(DataSource(s.get("package"), s["path"]) for s in sources)
    result = ran = executor.run_public(script, task_id, public, RunLimits.from_dict(limits), keep=keep,
                                       sources=declared)
    submission = None
    if result.submission_path:
        submission, result = _bring_back(result, max_bytes)
        if not keep:
            executor.discard(ran)
    yield {"result": result.to_dict(), "submission": submission, "shipped": shipped}


def _bring_back(result: ExecutionResult, max_bytes: int) -> tuple[bytes | None, ExecutionResult]:
    """The submission's bytes, or None (and a warning) when they are over `max_bytes`."""
    with open(result.submission_path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        submission = f.read(max_bytes + 1) if size <= max_bytes else b""
    if size <= max_bytes and len(submission) <= max_bytes:
        return submission, result
    return None, ExecutionResult.from_dict({
        **result.to_dict(), "submission_path": None,
        "warnings": [*result.warnings, f"the submission ({size} bytes) is over the {max_bytes}-byte "
                     "limit for this task (10x the answers file plus 1 MiB); it was not brought back"],
    })


def node_isolation(isolation: str, base_dir: str | None) -> str:
    return node_executor(isolation, base_dir).isolation


def clean_node(base_dir: str | None, wait_s: float = CLEAN_WAIT_S) -> int:
    """On the node of a run whose worker was killed by force: once that worker's session
    is free (the process gone), remove it and kill what its runs left running
    (workspace.clean_stale; an unisolated run's processes can outlive a killed worker).
    Polls for up to `wait_s`; the number of sessions removed."""
    from mleforge.sandbox.workspace import clean_stale, default_base

    base = Path(base_dir) if base_dir else default_base()
    deadline = time.monotonic() + wait_s
    while True:
        removed = clean_stale(base)
        if removed or time.monotonic() >= deadline:
            return len(removed)
        time.sleep(0.2)


_executors: dict[tuple, Any] = {}
_executors_lock = threading.Lock()


def node_executor(isolation: str, base_dir: str | None):
    """One local executor per worker process and setting, closed when the worker exits."""
    from mleforge.sandbox.local import LocalExecutor

    with _executors_lock:
        key = (isolation, base_dir)
        if key not in _executors:
            executor = LocalExecutor(isolation, base_dir=base_dir)
            atexit.register(executor.close)
            _executors[key] = executor
        return _executors[key]


_data_lock = threading.Lock()


def node_data(key: str, ref) -> tuple[Path, bool]:
    """The task's public data on this node, and whether this call fetched it: unpacked
    once per checksum (the other runs find it there and never touch the object), checked
    against it, readable by the sandbox's uids, never written to again."""
    import fcntl

    root = data_root()
    final = root / key / "public"
    if final.is_dir():
        return final, False
    root.mkdir(parents=True, exist_ok=True)
    os.chmod(root, 0o755)  # the sandbox's uid must reach the data
    with _data_lock, open(root / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one unpacking per node, whatever its worker processes
        if final.is_dir():
            return final, False
        _unpack(key, ray_module().get(ref), root)
    return final, True


def _unpack(key: str, archive: bytes, root: Path) -> None:
    """Unpack into a staging folder, check, make read-only, move into place. Called under
    the key's lock: a staging folder of the key found there is a killed worker's, removed."""
    from mleforge.sandbox.caching_executor import checksum_of_folder
    from mleforge.sandbox.workspace import remove_tree

    for stale in root.glob(f"{key}.*"):
        if stale.is_dir() and not stale.is_symlink():
            with contextlib.suppress(OSError):  # another user's, say: it only takes room
                remove_tree(stale)
    staging = Path(tempfile.mkdtemp(prefix=f"{key}.", dir=root))
    try:
        with tarfile.open(fileobj=io.BytesIO(archive), mode="r") as tar:
            # Our own archive, but never trusted to stay inside `staging`.
            if hasattr(tarfile, "data_filter"):
                tar.extractall(staging, filter="data")
            else:  # Python < 3.11.4
                check_members(tar)
                tar.extractall(staging)
        unpacked = staging / "public"
        if checksum_of_folder(unpacked) != key:
            raise SandboxError(f"the task data shipped to this node does not match its checksum {key[:12]}")
        for path in [unpacked, *unpacked.rglob("*")]:
            os.chmod(path, 0o555 if path.is_dir() else 0o444)
        os.chmod(staging, 0o755)
        os.replace(staging, root / key)
    except BaseException:
        # Read-only by now, maybe: remove_tree makes each folder writable first, as a non-root
        # worker must. The error raised is the one that stopped the unpacking, never this one's.
        with contextlib.suppress(OSError):
            remove_tree(staging)
        raise


def check_members(tar: tarfile.TarFile) -> None:
    for member in tar.getmembers():
        parts = Path(member.name).parts
        if member.name.startswith("/") or ".." in parts or not (member.isfile() or member.isdir()):
            raise SandboxError(f"the task data archive holds an unsafe entry: {member.name!r}")
