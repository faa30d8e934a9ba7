"""benchmarks/ray_exec.py: its arguments, and its table computed from the rounds it measured."""

from __future__ import annotations

import argparse

import pytest

from tests.benchmark_module import load_benchmark

bench = load_benchmark("ray_exec")


def test_concurrency_is_comma_separated_positive_counts():
    assert bench.positive_counts("1,2,4") == (1, 2, 4)
    for bad in ("", "0,2", "1,x", "-1"):
        with pytest.raises(argparse.ArgumentTypeError, match="comma-separated positive integers"):
            bench.positive_counts(bad)


def test_the_table_holds_medians_over_rounds_and_their_ratio():
    rows = [
        {"script": s, "concurrency": c, "executor": e, "runs": 4, "runs_per_s": rates}
        for s in bench.SCRIPTS for c, e, rates in [
            (1, "local", [2.0, 4.0, 3.0]), (1, "ray", [1.0, 2.0, 1.5]),
            (2, "local", [5.0, 6.0, 4.0]), (2, "ray", [5.0, 5.0, 6.0]),
        ]
    ]
    table = bench.table_of(rows, (1, 2))
    assert table[:2] == [["empty", 1, 3.0, 1.5, 0.5], ["empty", 2, 5.0, 5.0, 1.0]]
    assert [row[0] for row in table] == ["empty", "empty", "pandas-csv", "pandas-csv"]
    assert len(bench.COLUMNS) == len(table[0])


def test_bad_counts_stop_before_anything_starts(capsys):
    with pytest.raises(SystemExit):
        bench.main(["--runs", "0"])
    assert "--runs must be >= 1" in capsys.readouterr().err
