"""The result cache: content-addressed keys, hits that cost a lookup, corruption never trusted, concurrent writers."""

from __future__ import annotations

import dataclasses
import logging
import multiprocessing
import os
import sqlite3
import threading
from pathlib import Path

import pytest

from mleforge.grading.grader import grade
from mleforge.sandbox import RunLimits
from mleforge.sandbox.caching_executor import CachingExecutor, public_checksum
from mleforge.sandbox.local import LocalExecutor
from mleforge.sandbox.result import ExecutionResult
from mleforge.sandbox.result_cache import CacheKey, ResultCache, cacheable

SOLUTION = (Path(__file__).parent / "hostile" / "valid_solution.py").read_text()


def _key(**changes) -> CacheKey:
    base = dict(task_id="t", data_checksum="d" * 64, script_sha256="s" * 64, limits={"timeout_s": 1.0, "cpus": 1},
                executor="local:bwrap", environment="python 3.11")
    return CacheKey(**{**base, **changes})


def _result(**changes) -> ExecutionResult:
    base = dict(run_id="r1", task_id="t", returncode=0, signal=None, timed_out=False, killed_by=None, wall_s=1.5,
                cpu_s=1.0, peak_memory_mb=50.0, stdout="out", stderr="", stdout_bytes=3, stderr_bytes=0,
                submission_path="/somewhere/submission.csv", isolation="bwrap")
    return ExecutionResult(**{**base, **changes})


@pytest.fixture
def cached(tmp_path):
    """A real executor (unisolated: fast) behind a cache file."""
    with CachingExecutor(LocalExecutor("none", base_dir=tmp_path / "ws"), tmp_path / "cache.sqlite") as executor:
        yield executor


def test_the_key_covers_every_input():
    key = _key()
    assert key.digest == _key().digest and len(key.digest) == 64
    variants = [_key(task_id="u"), _key(data_checksum="e" * 64), _key(script_sha256="x" * 64),
                _key(limits={"timeout_s": 2.0, "cpus": 1}), _key(executor="pool:bwrap"), _key(environment="3.12")]
    assert len({v.digest for v in variants} | {key.digest}) == 7
    # Canonical: the order of the limits does not matter.
    assert _key(limits={"cpus": 1, "timeout_s": 1.0}).digest == key.digest


def test_what_is_cacheable():
    assert cacheable(_result()) and cacheable(_result(killed_by="timeout", timed_out=True, returncode=None))
    assert not cacheable(_result(killed_by="cancelled"))
    assert not cacheable(_result(workspace="/kept"))
    assert not cacheable(_result(warnings=("a process of the run survived SIGKILL for 10 s",)))


def test_a_bounded_cache_evicts_the_least_recently_used(tmp_path):
    import json

    submission = b"x" * 1000
    size = len(_key(task_id="a").to_json()) + len(json.dumps(_result().to_dict(), sort_keys=True)) + 1000
    cache = ResultCache(tmp_path / "c.sqlite", max_mb=2.5 * size / (1024 * 1024))  # room for two
    cache.put(_key(task_id="a"), _result(), submission)
    cache.put(_key(task_id="b"), _result(), submission)
    assert cache.total_bytes == 2 * size and cache.evicted == 0
    assert cache.get(_key(task_id="a")) is not None  # a use: b is now the least recent
    cache.put(_key(task_id="c"), _result(), submission)
    assert cache.evicted == 1 and cache.total_bytes == 2 * size
    assert cache.get(_key(task_id="b")) is None
    assert cache.get(_key(task_id="a")) is not None and cache.get(_key(task_id="c")) is not None
    # An entry larger than the whole bound is not stored, and evicts nothing.
    cache.put(_key(task_id="d"), _result(), b"y" * (3 * size))
    assert cache.get(_key(task_id="d")) is None and len(cache) == 2
    # Unbounded (the default): nothing is ever evicted.
    free = ResultCache(tmp_path / "free.sqlite")
    for name in "abcdef":
        free.put(_key(task_id=name), _result(), submission)
    assert len(free) == 6 and free.evicted == 0 and free.total_bytes == 6 * size


def test_a_bound_must_be_positive(tmp_path):
    from mleforge.errors import SandboxError

    with pytest.raises(SandboxError, match="max_mb must be > 0"):
        ResultCache(tmp_path / "c.sqlite", max_mb=0)


def test_round_trip(tmp_path):
    cache = ResultCache(tmp_path / "c.sqlite")
    assert cache.get(_key()) is None
    cache.put(_key(), _result(), b"id,y\n1,2\n")
    hit = cache.get(_key())
    assert hit.result == _result() and hit.submission == b"id,y\n1,2\n"
    cache.put(_key(task_id="other"), _result(submission_path=None), None)
    assert cache.get(_key(task_id="other")).submission is None and len(cache) == 2


def test_identical_scripts_run_once(cached, canary):
    group = [SOLUTION] * 4 + ["print('other')"]
    results = cached.run_many(group, canary, max_workers=4)
    assert (cached.misses, cached.hits) == (2, 3)
    assert [r.cached for r in results].count(True) == 3
    assert len({r.run_id for r in results}) == 5
    submissions = {Path(r.submission_path).read_bytes() for r in results[:4]}
    assert len(submissions) == 1 and len({r.submission_path for r in results[:4]}) == 4
    for result in results[:4]:
        assert grade(canary, result.submission_path).valid_submission
    again = cached.run(SOLUTION, canary)  # across steps: a lookup
    assert again.cached and again.stdout == results[0].stdout
    hit_file = Path(again.submission_path)
    cached.discard(again)
    assert not hit_file.exists()


def test_limits_and_timeouts_are_part_of_the_key(cached, canary):
    limits = RunLimits(timeout_s=1, memory_mb=512, cpus=1)
    first = cached.run("import time\ntime.sleep(30)", canary, limits)
    second = cached.run("import time\ntime.sleep(30)", canary, limits)
    assert first.killed_by == "timeout" and second.cached and second.killed_by == "timeout"
    third = cached.run("import time\ntime.sleep(30)", canary, dataclasses.replace(limits, timeout_s=1.5))
    assert not third.cached


def test_cancelled_and_kept_runs_are_not_cached(cached, canary):
    cancel = threading.Event()
    cancel.set()
    assert cached.run("print(1)", canary, cancel=cancel).killed_by == "cancelled"
    assert not cached.run("print(1)", canary).cached
    kept = cached.run("print(2)", canary, keep=True)
    assert not cached.run("print(2)", canary).cached
    from mleforge.sandbox.workspace import remove_tree

    remove_tree(Path(kept.workspace).parent)


def test_a_submission_over_the_grading_bound_is_never_cached(cached, canary):
    """The cache would hold it in memory and in SQLite; the grader refuses it unread anyway."""
    from mleforge.grading.submission import submission_byte_limit

    limit = submission_byte_limit(canary.answers_path.stat().st_size)
    big = f"open('submission/submission.csv', 'w').write('id,y\\n' + '1' * {limit})"
    first = cached.run(big, canary)
    assert first.submission_path and Path(first.submission_path).stat().st_size == limit + 5
    assert not cached.run(big, canary).cached and cached.misses == 2
    assert "over the" in grade(canary, first.submission_path).invalid_reason


def test_the_data_checksum_follows_the_public_data(canary):
    checksum = public_checksum(canary)
    from mleforge.sandbox.caching_executor import checksum_of_folder

    assert checksum == checksum_of_folder(canary.public_dir)  # manifest and files agree


def _tamper(path: Path, sql: str, args=()) -> None:
    with sqlite3.connect(path) as conn:
        conn.execute(sql, args)


@pytest.mark.parametrize("sql", [
    "UPDATE results SET result_json = '{\"broken'",
    "UPDATE results SET submission = X'00'",
    "UPDATE results SET key_json = '{}'",
])
def test_a_tampered_row_is_dropped(tmp_path, sql, caplog):
    path = tmp_path / "c.sqlite"
    cache = ResultCache(path)
    cache.put(_key(), _result(), b"id,y\n")
    _tamper(path, sql)
    with caplog.at_level(logging.WARNING, logger="mleforge.sandbox"):
        assert cache.get(_key()) is None
    assert "dropped the entry" in caplog.text and len(cache) == 0


def test_a_row_with_a_forged_checksum_still_has_to_parse(tmp_path):
    from mleforge.sandbox.result_cache import _checksum

    path = tmp_path / "c.sqlite"
    cache = ResultCache(path)
    cache.put(_key(), _result(), None)
    _tamper(path, "UPDATE results SET result_json = '{}', checksum = ?", (_checksum(_key().to_json(), "{}", None),))
    assert cache.get(_key()) is None and len(cache) == 0


@pytest.mark.parametrize("damage", ["truncate", "garbage", "foreign"])
def test_a_damaged_file_is_moved_aside_and_rebuilt(tmp_path, damage, caplog):
    path = tmp_path / "c.sqlite"
    cache = ResultCache(path)
    for i in range(50):
        cache.put(_key(task_id=f"t{i}"), _result(stdout="x" * 2000), os.urandom(2000))
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    if damage == "truncate":
        with open(path, "r+b") as f:
            f.truncate(path.stat().st_size // 2)
    elif damage == "garbage":
        with open(path, "r+b") as f:
            f.seek(0)
            f.write(os.urandom(8192))
    else:
        _tamper(path, "UPDATE meta SET value = '0' WHERE name = 'format'")
    with caplog.at_level(logging.WARNING, logger="mleforge.sandbox"):
        fresh = ResultCache(path)
    assert fresh.rebuilds == 1 and len(fresh) == 0 and "moved to" in caplog.text
    assert list(tmp_path.glob("c.sqlite.bad-*"))
    fresh.put(_key(), _result(), b"ok")
    assert fresh.get(_key()).submission == b"ok"


def test_damage_found_while_open_is_rebuilt(tmp_path):
    path = tmp_path / "c.sqlite"
    cache = ResultCache(path)
    cache.put(_key(), _result(), None)
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    path.write_bytes(os.urandom(4096))
    assert cache.get(_key()) is None  # detected, rebuilt, a miss
    cache.put(_key(), _result(), None)
    assert cache.get(_key()) is not None and cache.rebuilds == 1


def _writer(path: str, worker: int, count: int) -> None:
    cache = ResultCache(path)
    for i in range(count):
        shared = i % 10  # every worker writes these ten
        cache.put(_key(task_id=f"shared-{shared}"), _result(run_id=f"w{worker}"), f"{shared}".encode())
        cache.put(_key(task_id=f"own-{worker}-{i}"), _result(run_id=f"w{worker}"), os.urandom(512))
        cache.get(_key(task_id=f"shared-{(i + 3) % 10}"))


def test_concurrent_writers(tmp_path):
    path = str(tmp_path / "c.sqlite")
    ResultCache(path)
    context = multiprocessing.get_context("spawn")
    workers = [context.Process(target=_writer, args=(path, w, 30)) for w in range(3)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(120)
    assert [w.exitcode for w in workers] == [0, 0, 0]
    cache = ResultCache(path)
    assert len(cache) == 10 + 3 * 30 and cache.rebuilds == 0
    for shared in range(10):
        assert cache.get(_key(task_id=f"shared-{shared}")).submission == f"{shared}".encode()
    for w in range(3):
        assert cache.get(_key(task_id=f"own-{w}-29")).result.run_id == f"w{w}"
