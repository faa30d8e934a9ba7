"""benchmarks/collect_tokens.py end to end on a small collect (titanic, one episode of two
steps): its JSON records the completion budget the collect it ran used."""

from __future__ import annotations

import json

import pytest

from tests.benchmark_module import assert_convention, load_benchmark
from tests.policies.test_bundled_models import skip_unless_installed


@skip_unless_installed("qwen2.5-coder-0.5b")
def test_the_benchmark_records_the_budget_of_the_collect_it_ran(titanic, tmp_path):
    pytest.importorskip("transformers")
    from mleforge.expert.collect import COMPACT_COMPLETION_CHARS

    bench = load_benchmark("collect_tokens")
    out = tmp_path / "out.json"
    common = ["--tasks", "titanic", "--episodes", "1", "--steps", "2", "--workers", "1"]
    assert bench.main([*common, "--work", str(tmp_path / "work"), "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["completion_budget_chars"] == COMPACT_COMPLETION_CHARS
    assert result["samples"] == len(result["rows"]) > 0
    assert result["samples"] == sum(result["samples_by_stage"].values())
    assert_convention(result, "collect_tokens")
    stages = {row[0]: row for row in result["table"]["rows"]}
    assert set(stages) == set(result["by_stage"]) and stages["draft"][1] == result["by_stage"]["draft"]["completion_tokens"]["n"]
    assert stages["draft"][-1] == f"{result['by_stage']['draft']['within_cap']['256']:.0%}"
    # measuring what exists reads the budget from its collect.json: the same figure
    assert bench.main(["--samples", str(tmp_path / "work" / "samples.jsonl"), "--out", str(out)]) == 0
    assert json.loads(out.read_text())["completion_budget_chars"] == COMPACT_COMPLETION_CHARS
