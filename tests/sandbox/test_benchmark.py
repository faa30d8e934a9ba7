"""benchmarks/sandbox.py: its arguments are checked before anything long runs."""

from __future__ import annotations

import argparse
import os
import pwd

import pytest

from mleforge.errors import ConfigError
from tests.benchmark_module import load_benchmark

NO_SUCH_USER = "mleforge-no-such-user"




bench = load_benchmark("sandbox")


def test_an_unknown_as_user_is_a_clear_error():
    with pytest.raises(ConfigError, match=f"--as-user '{NO_SUCH_USER}': there is no such user") as caught:
        bench._unprivileged_user(NO_SUCH_USER, as_root=True)
    assert "--as-user nobody" in str(caught.value) and "--as-user ''" in str(caught.value)
    # Used only from root, and left out with an empty name: nothing to check then.
    assert bench._unprivileged_user(NO_SUCH_USER, as_root=False) is None
    assert bench._unprivileged_user("", as_root=True) is None
    root = pwd.getpwuid(0).pw_name
    assert bench._unprivileged_user(root, as_root=True).pw_uid == 0


@pytest.mark.skipif(os.geteuid() != 0, reason="--as-user is used only when the benchmark runs as root")
def test_the_benchmark_stops_on_an_unknown_as_user_before_running_anything(tmp_path):
    out = tmp_path / "sandbox.json"
    with pytest.raises(SystemExit) as stopped:
        # An unknown task too: the user is checked first, before the task is looked up.
        bench.main(["--latency-only", "--as-user", NO_SUCH_USER, "--task", "no-such-task", "--out", str(out)])
    assert str(stopped.value.code).startswith(f"error: --as-user '{NO_SUCH_USER}': there is no such user")
    assert not out.exists()


def test_workers_are_comma_separated_positive_counts():
    assert bench._worker_counts("1,4,16") == (1, 4, 16)
    assert bench._worker_counts("2") == (2,)
    for bad in ("", "0,4", "1,x", "-1"):
        with pytest.raises(argparse.ArgumentTypeError, match="comma-separated positive integers"):
            bench._worker_counts(bad)
