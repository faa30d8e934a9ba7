"""The aggregation math on hand-made reports, against numbers computed by hand."""

from __future__ import annotations

import json
import math

import pytest

from mleforge.eval.aggregate import aggregate, mean_sem
from mleforge.eval.records import RunReport
from tests.eval.helpers import grid_reports, report

SQRT3 = math.sqrt(3)


def test_means_are_rounded_to_six_decimals():
    # (0.1 + 0.2) / 2 is 0.15000000000000002 in floats; a report shows 0.15.
    assert mean_sem([0.1, 0.2])["mean"] == 0.15
    assert mean_sem([0.1234561, 0.1234581])["mean"] == 0.123457  # 0.1234571


def test_mean_sem_by_hand():
    # 1, 1, 0.5: mean 5/6; deviations 1/6, 1/6, -1/3; sum of squares 1/6; variance (ddof=1) 1/12
    got = mean_sem([1.0, 1.0, 0.5])
    assert got["mean"] == pytest.approx(5 / 6)
    assert got["sem"] == pytest.approx(math.sqrt(1 / 12) / SQRT3)
    assert got["n"] == 3
    assert mean_sem([0.4]) == {"mean": 0.4, "sem": None, "n": 1}  # one seed: no spread estimate
    assert mean_sem([]) == {"mean": None, "sem": None, "n": 0}


def test_grid_with_a_failed_run_and_an_invalid_run():
    reports, failures = grid_reports()
    agg = aggregate(reports, ["A", "B"], [0, 1, 2], failures)
    m = agg["metrics"]

    # valid per seed: s0 2/2, s1 1/1 (B failed: left out), s2 1/2 (A invalid: counts 0)
    assert m["valid_submission"]["per_seed"] == {"0": 1.0, "1": 1.0, "2": 0.5}
    assert m["valid_submission"]["mean"] == 0.833333  # 5/6, means rounded to 6 decimals
    assert m["valid_submission"]["sem"] == pytest.approx(math.sqrt(1 / 12) / SQRT3)
    # above median: 1, 0, 0.5 -> mean 0.5, deviations .5, -.5, 0 -> variance .25 -> sem .5/sqrt3
    assert m["above_median"]["per_seed"] == {"0": 1.0, "1": 0.0, "2": 0.5}
    assert m["above_median"]["mean"] == pytest.approx(0.5)
    assert m["above_median"]["sem"] == pytest.approx(0.5 / SQRT3)
    # any medal: s0 gold + bronze, s1 none, s2 silver of two -> the same numbers
    assert m["any_medal"]["per_seed"] == {"0": 1.0, "1": 0.0, "2": 0.5}
    # gold 0.5, 0, 0 -> mean 1/6, variance ((1/3)^2 + 2 (1/6)^2) / 2 = 1/12
    for medal, per_seed in (("gold_medal", [0.5, 0, 0]), ("silver_medal", [0, 0, 0.5]),
                            ("bronze_medal", [0.5, 0, 0])):
        assert list(m[medal]["per_seed"].values()) == per_seed
        assert m[medal]["mean"] == 0.166667
        assert m[medal]["sem"] == pytest.approx(math.sqrt(1 / 12) / SQRT3)
    # normalized: s0 (1 + .6)/2 = .8, s1 .5, s2 (0 invalid + .8)/2 = .4 -> mean 1.7/3
    assert m["normalized_score"]["per_seed"] == pytest.approx({"0": 0.8, "1": 0.5, "2": 0.4})
    mean = 1.7 / 3
    variance = ((0.8 - mean) ** 2 + (0.5 - mean) ** 2 + (0.4 - mean) ** 2) / 2
    assert m["normalized_score"]["mean"] == 0.566667  # 1.7/3 to 6 decimals
    assert m["normalized_score"]["sem"] == pytest.approx(math.sqrt(variance) / SQRT3)
    # steps to the first valid: s0 (1 + 2)/2, s1 3, s2 1 (the invalid run has none) -> mean 5.5/3
    assert m["steps_to_first_valid"]["per_seed"] == {"0": 1.5, "1": 3.0, "2": 1.0}
    mean = 5.5 / 3
    variance = ((1.5 - mean) ** 2 + (3 - mean) ** 2 + (1 - mean) ** 2) / 2
    assert m["steps_to_first_valid"]["sem"] == pytest.approx(math.sqrt(variance) / SQRT3)

    assert agg["runs"]["expected"] == 6 and agg["runs"]["finished"] == 5 and agg["runs"]["failed"] == 1
    assert agg["runs"]["missing"] == [{"task_id": "B", "seed": 1, "reason": "failed", "error": "RuntimeError: boom"}]
    assert agg["mlebench"]["total_runs"] == 5 and agg["mlebench"]["total_medals"] == 3
    assert agg["usage"]["completion_tokens"] == 500
    json.dumps(agg)  # JSON as it is


def test_per_task_best_and_avg():
    reports, failures = grid_reports()
    a, b = aggregate(reports, ["A", "B"], [0, 1, 2], failures)["per_task"]
    assert (a["runs"], a["valid"], a["missing"]) == (3, 2, 0)
    assert a["best"] == 0.96 and a["avg"] == pytest.approx(0.88)
    assert a["mean_normalized_score"] == pytest.approx(0.5)  # (1 + .5 + 0) / 3
    assert a["scores"] == {"0": 0.96, "1": 0.8, "2": None}
    assert (a["gold"], a["above_median"]) == (1, 1)
    # B: lower is better, so the best is the smallest
    assert (b["runs"], b["valid"], b["missing"]) == (2, 2, 1)
    assert b["best"] == 1.5 and b["avg"] == pytest.approx(1.75) and b["is_lower_better"]
    assert (b["silver"], b["bronze"]) == (1, 1)
    assert b["thresholds"] == {"gold": 1.0, "silver": 1.5, "bronze": 2.0, "median": 2.5}


def test_one_seed_and_missing_seeds():
    reports, _ = grid_reports()
    one = aggregate(reports, ["A", "B"], [0])
    assert one["metrics"]["valid_submission"] == {"mean": 1.0, "sem": None, "n": 1, "per_seed": {"0": 1.0}}
    # Seed 3 was never run: listed as missing, and no seed value is made up for it.
    more = aggregate(reports, ["A", "B"], [0, 1, 2, 3])
    assert more["metrics"]["valid_submission"]["n"] == 3
    assert [(x["task_id"], x["seed"], x["reason"]) for x in more["runs"]["missing"]] == [
        ("A", 3, "not run"), ("B", 1, "not run"), ("B", 3, "not run")]
    nothing = aggregate([], ["A"], [0, 1])
    assert nothing["metrics"]["any_medal"]["mean"] is None and nothing["per_task"][0]["best"] is None


def test_reports_outside_the_grid_are_ignored():
    reports, _ = grid_reports()
    agg = aggregate(reports + [report("C", 0, 1.0)], ["A"], [0])
    assert [r["task_id"] for r in agg["reports"]] == ["A"]


def test_run_report_round_trip_and_mlebench_fields():
    original = grid_reports()[0][0]
    data = json.loads(json.dumps(original.to_dict()))
    assert RunReport.from_dict(data) == original
    # MLE-bench's CompetitionReport fields first, then ours
    assert list(data)[:3] == ["competition_id", "score", "gold_threshold"]
    assert {"seed", "steps_to_first_valid", "wall_s", "completion_tokens", "stopped_by"} <= set(data)
