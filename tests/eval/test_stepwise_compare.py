"""Paired comparison of two step-wise results (mleforge.eval.stepwise_compare) and `mleforge eval
compare`, on hand-made result files: exact differences, refusals, the null control, the tables."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest

from mleforge.cli.main import main
from mleforge.errors import ConfigError
from mleforge.eval.stepwise import StepwiseRecord, StepwiseResult
from mleforge.eval.stepwise_compare import (
    StepwiseComparison,
    compare_results,
    comparison_caption,
    comparison_rows,
    null_control,
)
from mleforge.eval.stepwise_report import stage_comparisons, stages_table

T975_2 = 4.30265273  # Student's t, 0.975 quantile, 2 degrees of freedom
SAMPLING = {"temperature": 0.7, "top_p": 1.0, "max_new_tokens": 64, "seed": 0, "stop": []}
OUTCOME = {0.5: "valid", -0.2: "execution_error", -0.3: "format_error"}


def result(policy: str, rewards: dict[str, list[float]], seeds=(0, 1), flat=("s4",)) -> StepwiseResult:
    """Every state a draft state of task t; a reward of 0.5 is a valid run, -0.2 a crash, -0.3 a format error."""
    records = tuple(StepwiseRecord(state, "t", "draft", OUTCOME[r], r, None, None, None, None, 10,
                                   headroom=state not in flat, seed=seed, delta=0.0 if r == 0.5 else None)
                    for state, values in rewards.items() for seed, r in zip(seeds, values))
    return StepwiseResult(policy, ("t",), SAMPLING, "compact", records, seeds=tuple(seeds))


A = {"s1": [0.5, -0.2], "s2": [-0.3, -0.3], "s3": [0.5, 0.5], "s4": [0.5, 0.5]}
B = {"s1": [0.5, 0.5], "s2": [0.5, -0.2], "s3": [0.5, 0.5], "s4": [-0.2, -0.2]}


def test_paired_differences_by_state():
    c = compare_results(result("base", A), result("tuned", B), labels=("base", "tuned"))
    assert c.states == ("s1", "s2", "s3") and c.no_headroom == 1 and c.kind == "paired"
    reward = c.metrics["mean_reward"]
    # state means A [0.15, -0.3, 0.5], B [0.5, 0.15, 0.5]: d = [0.35, 0.45, 0]; mean 0.8 / 3;
    # deviations 0.25 / 3, 0.55 / 3, -0.8 / 3: variance (0.0625 + 0.3025 + 0.64) / 9 / 2, se sqrt(var / 3)
    se = math.sqrt((0.0625 + 0.3025 + 0.64) / 9 / 2 / 3)
    assert reward.diff == pytest.approx(0.8 / 3) and reward.se == pytest.approx(se)
    assert reward.ci_low == pytest.approx(0.8 / 3 - T975_2 * se, abs=1e-7)
    assert (reward.up, reward.down, reward.tied, reward.n) == (2, 0, 1, 3)
    assert reward.mean_a == pytest.approx(0.35 / 3) and reward.mean_b == pytest.approx(1.15 / 3)
    # valid: A [1/2, 0, 1], B [1, 1/2, 1]: d = [1/2, 1/2, 0], mean 1/3, variance 1/12, se 1/6
    valid = c.metrics["valid_rate"]
    assert valid.diff == pytest.approx(1 / 3) and valid.se == pytest.approx(1 / 6)
    assert valid.ci_high == pytest.approx(1 / 3 + T975_2 / 6, abs=1e-7) and valid.covers_zero is True
    # improve_rate applies to improve states only: none here
    assert c.metrics["improve_rate"].n == 0 and c.metrics["improve_rate"].diff is None
    assert StepwiseComparison.from_dict(json.loads(json.dumps(c.to_dict()))) == c
    columns, rows = comparison_rows(c)
    assert columns[:4] == ("metric", "base", "tuned", "tuned − base (paired)")
    assert rows[1] == ("valid %", "50.0", "83.3", "+33.3 ± 16.7", f"[{100 / 3 - 100 * T975_2 / 6:+.1f}, "
                       f"{100 / 3 + 100 * T975_2 / 6:+.1f}]", "2 / 0 / 1", "3")


def test_pairs_that_do_not_match_are_refused():
    a = result("base", A)
    with pytest.raises(ConfigError, match="same \\(state, seed\\) pairs"):
        compare_results(a, result("tuned", B, seeds=(1, 2)))
    with pytest.raises(ConfigError, match="not evaluated on the same states"):
        compare_results(a, result("tuned", {k: v for k, v in B.items() if k != "s2"}))
    other = compare_results(a, result("base", B, seeds=(2, 3)), other_seeds=True)
    assert other.kind == "other_seeds" and other.seeds_b == (2, 3)
    with pytest.raises(ConfigError, match="not evaluated on the same states"):
        compare_results(a, result("tuned", {k: v for k, v in B.items() if k != "s2"}), other_seeds=True)


def test_a_result_of_format_1_pairs_with_one_made_since():
    # A run saved before the seeds (StepwiseConfig.LEGACY: one completion per state at the
    # sampling's seed) and resumed since: its "before" has no seeds, its "after" records seed 0.
    old = result("base", {k: v[:1] for k, v in A.items()}, seeds=(0,)).to_dict()
    del old["format"], old["seeds"]
    for record in old["records"]:
        del record["seed"]
    before = StepwiseResult.from_dict(old)
    assert before.seeds == (0,) and {r.seed for r in before.records} == {0}
    c = compare_results(before, result("tuned", {k: v[:1] for k, v in B.items()}, seeds=(0,)))
    assert c.kind == "paired" and c.metrics["mean_reward"].diff == pytest.approx((0.0 + 0.8 + 0.0) / 3)


def test_a_state_without_headroom_on_either_side_is_left_out_and_counted():
    # A result written before headroom was recorded (None: unknown, in the headline) against one
    # that knows s4 has none: s4 is compared on neither side, and counted apart.
    old = result("base", A, flat=())
    old = StepwiseResult(old.policy, old.tasks, old.sampling, old.prompt_profile,
                         tuple(replace(r, headroom=None) for r in old.records), seeds=old.seeds)
    c = compare_results(old, result("tuned", B))
    assert c.states == ("s1", "s2", "s3") and c.no_headroom == 1
    assert c.metrics["mean_reward"].n == 3 and c.metrics["mean_reward"].diff == pytest.approx(0.8 / 3)
    assert "on the same 3 states with headroom" in comparison_caption(c)


def test_the_null_control_splits_the_seeds():
    a = result("base", A)
    null = null_control(a)
    # seed 0 against seed 1, states with headroom: s1 0.5 -> -0.2, s2 and s3 unchanged: d = [-0.7, 0, 0]
    d = null.metrics["mean_reward"]
    assert null.kind == "null_halves" and null.seeds_a == (0,) and null.seeds_b == (1,)
    assert d.diff == pytest.approx(-0.7 / 3) and (d.up, d.down, d.tied) == (0, 1, 2) and d.covers_zero is True
    with pytest.raises(ConfigError, match="--samples 2"):
        null_control(result("base", {"s1": [0.5]}, seeds=(0,)))


def test_stage_tables_of_a_training_run():
    before, sft, after = result("m", A), result("m-sft", B), result("m-grpo", A)
    comparisons = stage_comparisons([("before", before), ("after SFT", sft), ("after", after)])
    assert [(c.label_a, c.label_b) for c in comparisons] == [("before", "after SFT"), ("after SFT", "after"),
                                                            ("before", "after")]
    assert comparisons[1].metrics["mean_reward"].diff == pytest.approx(-0.8 / 3)
    assert comparisons[2].metrics["mean_reward"].diff == 0.0 and comparisons[2].metrics["mean_reward"].tied == 3
    columns, rows = stages_table([("before", before), ("after", after)])
    assert columns == ("metric", "before", "after")
    assert rows[0][0] == "mean reward" and rows[-3:] == [("states with headroom (the figures' n)", "3", "3"),
                                                         ("samples per state (seeds)", "2", "2"),
                                                         ("states without headroom (apart)", "1", "1")]


def test_cli_compare_on_result_files(tmp_path, capsys):
    files = {}
    for name, rewards, seeds in (("a", A, (0, 1)), ("b", B, (0, 1)), ("c", B, (5, 6))):
        files[name] = tmp_path / f"{name}.json"
        files[name].write_text(json.dumps(result(name, rewards, seeds=seeds).to_dict()))
    out = tmp_path / "cmp.json"
    assert main(["eval", "compare", str(files["a"]), str(files["b"]), "--labels", "base,tuned", "--json",
                 "--out", str(out)]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == json.loads(out.read_text())
    assert printed["metrics"]["mean_reward"]["diff"] == pytest.approx(0.8 / 3) and printed["n_states"] == 3
    assert printed["label_b"] == "tuned" and "state" in printed["unit"]
    assert main(["eval", "compare", str(files["a"]), str(files["c"])]) == 2
    assert "same (state, seed) pairs" in " ".join(capsys.readouterr().err.split())
    assert main(["eval", "compare", str(files["a"]), str(files["c"]), "--other-seeds"]) == 0
    assert "B − A" not in capsys.readouterr().out  # the table is headed by the paths
    assert main(["eval", "compare", str(files["a"]), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["kind"] == "null_halves"
    assert main(["eval", "compare", str(tmp_path / "missing.json"), str(files["b"])]) == 2
    assert "no step-wise result there" in " ".join(capsys.readouterr().err.split())


def test_files_that_are_not_step_wise_results_are_named_with_what_they_are(tmp_path, capsys):
    """A comparison's output, a JSON list, a result missing its records: the error names the file
    and what to give instead (not a KeyError of a field)."""
    good = tmp_path / "a.json"
    good.write_text(json.dumps(result("a", A).to_dict()))
    comparison = tmp_path / "comparison.json"
    comparison.write_text(json.dumps(compare_results(result("a", A), result("b", B)).to_dict()))
    listed = tmp_path / "list.json"
    listed.write_text("[]")
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps({k: v for k, v in result("a", A).to_dict().items() if k != "records"}))
    for bad, says in ((comparison, "a comparison"), (listed, "a JSON list"), (broken, "KeyError('records')")):
        assert main(["eval", "compare", str(bad), str(good)]) == 2
        err = " ".join(capsys.readouterr().err.split())
        assert f"{bad}: not a step-wise evaluation result" in err and says in err, err


def test_train_prints_the_runs_three_evaluations_and_their_paired_differences(tmp_path, capsys):
    """What `mleforge train` prints at its end (cli.train._print_stepwise), from the run's
    stepwise/ files: the stages side by side, then after SFT − before, after − after SFT,
    after − before, each with its paired difference and CI."""
    from mleforge.cli.train import _print_stepwise

    folder = tmp_path / "stepwise"
    folder.mkdir()
    for label, rewards in (("before", A), ("sft", B), ("after", B)):
        data = {"available": True, **result(label, rewards).to_dict()}
        (folder / f"{label}.json").write_text(json.dumps(data), encoding="utf-8")
    _print_stepwise(tmp_path)
    out = capsys.readouterr().out
    assert "after SFT" in out and "states with headroom (the figures' n)" in out
    for caption in ("after SFT − before", "after − after SFT", "after − before"):
        assert caption + " on the same 3 states" in " ".join(out.split()), out
    assert "+33.3 ± 16.7" in out  # valid %, after SFT − before (hand-computed above)
