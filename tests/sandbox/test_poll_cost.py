"""The parent's disk and memory poll costs a bounded share of a run, however many files the
run leaves (issue 31: 99k files in a workspace cost the parent ~19 s of CPU in polling)."""

from __future__ import annotations

import time

from mleforge.sandbox.process import DISK_CHECK_BACKOFF, DISK_CHECK_S, _Progress


def _progress() -> _Progress:
    return _Progress(deadline=time.monotonic() + 60, next_disk=0.0, kill=lambda thorough: None)


def test_a_slow_check_waits_in_proportion_to_its_cost():
    progress = _progress()
    cost = 0.05  # a walk of many thousand entries

    def slow_walk() -> bool:
        time.sleep(cost)
        return False

    before = time.monotonic()
    progress.check_limits(None, slow_walk, None)
    # The next check comes after at least DISK_CHECK_BACKOFF times the cost: the checks take
    # at most 1 / (1 + DISK_CHECK_BACKOFF) of the run's time.
    assert progress.next_disk - before >= cost + DISK_CHECK_BACKOFF * cost
    assert DISK_CHECK_BACKOFF * cost > DISK_CHECK_S and progress.reason is None


def test_a_cheap_check_keeps_its_period_and_a_run_over_its_disk_is_stopped():
    progress = _progress()
    before = time.monotonic()
    progress.check_limits(None, lambda: False, lambda: False)
    assert DISK_CHECK_S <= progress.next_disk - before < DISK_CHECK_S + 0.1
    progress.next_disk = 0.0
    progress.check_limits(None, lambda: True, None)
    assert progress.reason == "disk"
