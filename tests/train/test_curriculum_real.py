"""benchmarks/curriculum_real.py: its math by hand, and its core end to end on a tiny model
(2 seeds x 2 samplers x 1 real GRPO step, the shared warm start and step-wise evaluation)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from mleforge.errors import ConfigError
from mleforge.train.records import RolloutLine
from tests.benchmark_module import load_benchmark

bench = load_benchmark("curriculum_real")


def test_over_seeds_is_the_mean_and_the_sample_sem():
    # 0.5, 0.25, 0.0: mean 0.25; squared deviations 0.0625, 0, 0.0625 over n - 1 = 2: variance
    # 0.0625, sd 0.25; SEM 0.25 / sqrt(3) = 0.1443376
    out = bench.over_seeds({0: 0.5, 1: 0.25, 2: 0.0})
    assert out["mean"] == 0.25 and out["n"] == 3
    assert out["sem"] == pytest.approx(0.1443376, abs=1e-7)
    assert out["per_seed"] == {"0": 0.5, "1": 0.25, "2": 0.0}
    # a seed with no value is left out: 1.0, 0.0: mean 0.5, variance 0.5, SEM sqrt(0.5) / sqrt(2) = 0.5
    out = bench.over_seeds({0: 1.0, 1: None, 2: 0.0})
    assert (out["mean"], out["n"], out["per_seed"]["1"]) == (0.5, 2, None)
    assert out["sem"] == pytest.approx(0.5)
    assert bench.over_seeds({3: 0.7})["sem"] is None  # one seed has no standard error


def test_the_difference_is_paired_by_seed():
    uniform = {0: 0.5, 1: 0.25, 2: 0.0}
    learnability = {0: 0.75, 1: 0.25, 2: 0.5}
    # differences 0.25, 0, 0.5: mean 0.25, variance (0 + 0.0625 + 0.0625) / 2 = 0.0625, SEM 0.25 / sqrt(3)
    out = bench.paired_difference(uniform, learnability)
    assert out["mean"] == 0.25 and out["n"] == 3
    assert out["sem"] == pytest.approx(0.1443376, abs=1e-7)
    assert out["per_seed"] == {"0": 0.25, "1": 0.0, "2": 0.5}
    # not the unpaired SEM: hypot(SEM_u, SEM_l) = hypot(0.1443376, 0.1443376) = 0.2041241
    assert out["sem"] != pytest.approx(0.2041241, abs=1e-4)
    # only seeds both samplers have a value for: seed 1 (a None) and seed 2 (uniform only) drop out
    out = bench.paired_difference({0: 0.5, 1: 0.25, 2: 0.0, 3: 1.0}, {0: 0.75, 1: None, 3: 0.5})
    assert out["per_seed"] == {"0": 0.25, "3": -0.5} and out["mean"] == -0.125
    # differences 0.25, -0.5: variance ((0.375)^2 * 2) / 1 = 0.28125, SEM sqrt(0.28125 / 2) = 0.375
    assert out["sem"] == pytest.approx(0.375)


def line(step: int, group: int, index: int, reward: float | None, outcome: str) -> RolloutLine:
    return RolloutLine(step=step, index=index, group=group, rollout_id=f"r{step}-{index}", state_id="s",
                       task_id="titanic", stage="improve", completion="...", outcome=outcome, reward=reward,
                       components=None, score=None, error=None, cached=False, completion_tokens=3)


def test_run_figures_count_groups_per_step_and_leave_lost_rollouts_out():
    lines = [
        line(0, 0, 0, 0.5, "valid"), line(0, 0, 1, 0.5, "valid"),  # tied
        line(0, 1, 2, 0.5, "valid"), line(0, 1, 3, -0.3, "format_error"),  # not tied
        line(1, 0, 0, None, "lost"), line(1, 0, 1, -0.2, "execution_error"),  # one scored reward: tied
    ]
    out = bench.run_figures(lines)
    # groups are (step, group): step 1's group 0 is not step 0's (merged, they would not tie: 1/2)
    assert out["groups"] == 3 and out["frac_zero_std_groups"] == pytest.approx(2 / 3)
    # the scored rewards 0.5, 0.5, 0.5, -0.3, -0.2: 1.0 / 5
    assert out["reward_per_rollout"] == pytest.approx(0.2)
    assert (out["rollouts"], out["scored"]) == (6, 5)
    assert out["train_valid_rate"] == pytest.approx(3 / 6) and out["train_format_error_rate"] == pytest.approx(1 / 6)


def test_eta_is_the_mean_run_time_the_remaining_runs():
    assert bench.eta_seconds([10.0, 20.0], 3) == 45.0
    assert bench.eta_seconds([], 4) is None


def test_summarize_groups_runs_by_sampler_and_seed():
    runs = [{"sampler": s, "seed": k, **{key: v for key, _ in bench.FIGURES}}
            for s, k, v in (("uniform", 0, 0.5), ("learnability", 0, 0.75), ("uniform", 1, 0.25),
                            ("learnability", 1, 0.25))]
    samplers, difference = bench.summarize(runs)
    for key, _ in bench.FIGURES:
        assert samplers["uniform"][key]["mean"] == 0.375 and samplers["learnability"][key]["mean"] == 0.5
        assert samplers["uniform"][key]["sem"] == pytest.approx(0.125)  # |0.5 - 0.25| / 2
        assert difference[key]["per_seed"] == {"0": 0.25, "1": 0.0}
        assert difference[key]["mean"] == 0.125 and difference[key]["sem"] == pytest.approx(0.125)


def sem(values):
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1)) / math.sqrt(len(values))


ARGV = ("--tiny", "--tasks", "titanic", "--eval-tasks", "penguins", "--seeds", "2", "--steps", "1",
        "--group-size", "2", "--expert-steps", "3", "--stepwise-states", "2", "--sft-steps", "1",
        "--executor", "local", "--generation", "sampled-test", "--threads", "1")


@pytest.mark.slow
def test_the_benchmark_core_on_a_tiny_model(titanic, registry, tmp_path):
    """Real runs: the shared collect and SFT once, 2 seeds x 2 samplers x 1 GRPO step whose
    rollouts execute real scripts (tests/train/engines.py's sampled engine), the step-wise
    evaluation of the start and of each run on the same states; then again: nothing is redone."""
    pytest.importorskip("trl")
    from tests.train import engines  # noqa: F401  (registers sampled-test)

    work = tmp_path / "work"
    args = bench.build_parser().parse_args([*ARGV, "--work", str(work)])
    result = bench.run_benchmark(args, registry=registry, progress=False)

    assert result["rollouts_per_run"] == 2 and result["simulation"] is False
    assert result["config"]["tasks_resolved"] == ["titanic"] and result["config"]["eval_tasks_resolved"] == ["penguins"]
    assert result["config"]["sft_resolved"] == str(work / "sft")  # every run starts from the one warm start
    runs = result["runs"]
    assert [(r["sampler"], r["seed"]) for r in runs] == [("uniform", 0), ("learnability", 0), ("uniform", 1),
                                                         ("learnability", 1)]
    for r in runs:
        assert (r["steps"], r["rollouts"], r["groups"]) == (1, 2, 1)  # the same budget for each
        folder = Path(r["run_dir"])
        config = json.loads((folder / "run.json").read_text())
        assert config["status"] == "done" and config["sampler"] == r["sampler"] and config["seed"] == r["seed"]
        assert not (folder / "collect").exists() and not (folder / "sft").exists()  # shared, not per run
        after = json.loads((work / "stepwise" / f"after-{r['sampler']}-seed{r['seed']}.json").read_text())
        assert after["policy"] == f"hf:{folder / 'final'}"
        assert r["eval_mean_reward"] == after["metrics"]["mean_reward"]["mean"]
    start = json.loads((work / "stepwise" / "start.json").read_text())
    assert start["policy"] == f"hf:{work / 'sft' / 'model'}" and start["tasks"] == ["penguins"]
    assert [x["state_id"] for x in start["records"]] == [x["state_id"] for x in after["records"]]

    # each figure: mean and SEM over the seeds' values (the hand formula), the difference paired
    for key, _ in bench.FIGURES:
        for sampler in bench.SAMPLERS:
            values = [r[key] for r in runs if r["sampler"] == sampler]
            figure = result["samplers"][sampler][key]
            assert figure["per_seed"] == {"0": values[0], "1": values[1]} and figure["n"] == 2
            assert figure["mean"] == pytest.approx(sum(values) / 2)
            assert figure["sem"] == pytest.approx(sem(values)) and figure["sem"] == pytest.approx(
                abs(values[0] - values[1]) / 2)
        diffs = [runs[i + 1][key] - runs[i][key] for i in (0, 2)]
        assert result["difference"][key]["mean"] == pytest.approx(sum(diffs) / 2)
        assert result["difference"][key]["sem"] == pytest.approx(sem(diffs))
    # the sampled rollouts differ between seeds (seed 0 and 1 pick other scripts), so the check has teeth
    assert any(result["samplers"][s][key]["sem"] > 0 for s in bench.SAMPLERS for key, _ in bench.FIGURES)
    json.dumps(result)  # the JSON --out writes
    comparison, runs_table = bench.tables(result)  # the tables main writes with it and prints
    assert [row[0] for row in comparison["rows"]] == [name for _, name in bench.FIGURES]
    assert [row[:2] for row in runs_table["rows"]] == [[r["sampler"], r["seed"]] for r in runs]

    # again: every run is read back (its rollouts untouched), the figures are the same
    stamps = {p: p.stat().st_mtime_ns for p in work.glob("runs/*/rollouts/step-0.jsonl")}
    again = bench.run_benchmark(args, registry=registry, progress=False)
    assert len(stamps) == 4 and all(p.stat().st_mtime_ns == t for p, t in stamps.items())
    assert again["samplers"] == result["samplers"] and again["difference"] == result["difference"]
    # other settings on the same --work are refused, with what changed
    with pytest.raises(ConfigError, match=r"other settings \(different steps\)"):
        bench.run_benchmark(bench.build_parser().parse_args([*ARGV, "--work", str(work), "--steps", "2"]),
                            registry=registry, progress=False)
    with pytest.raises(ConfigError, match="needs at least 2"):
        bench.run_benchmark(bench.build_parser().parse_args([*ARGV, "--work", str(work), "--seeds", "1"]),
                            registry=registry, progress=False)


def test_the_shared_executor_is_the_one_mleforge_train_picks(monkeypatch, tmp_path):
    """executor auto: make_executor("auto")'s choice (the warm pool wherever it isolates, as any
    user), not a rule of its own; behind the benchmark's result cache."""
    pytest.importorskip("trl")
    from mleforge.sandbox import CachingExecutor
    from mleforge.sandbox.local import LocalExecutor
    from mleforge.train.config import TrainConfig

    asked = []
    picked = LocalExecutor(isolation="none")
    monkeypatch.setattr("mleforge.sandbox.make_executor",
                        lambda kind, **options: (asked.append(options) or picked) if kind == "auto" else None)
    executor = bench.shared_executor(TrainConfig(sandbox={"executor": "auto", "isolation": "none"}), tmp_path)
    try:
        assert isinstance(executor, CachingExecutor) and executor.inner is picked
        assert asked == [{"isolation": "none"}]
        assert (tmp_path / "results.sqlite").is_file()
    finally:
        executor.close()
