"""benchmarks/curriculum_real.py: its math by hand, its reuse of learning.py's runs, and its core
end to end on a tiny model (2 seeds x 2 samplers x 1 real GRPO step, the shared warm start,
the evaluation tasks' and the probe's states)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from mleforge.errors import ConfigError
from mleforge.train.records import RolloutLine
from tests.benchmark_module import load_benchmark

bench = load_benchmark("curriculum_real")
learning = load_benchmark("learning")
runs = bench.shared_runs


def evaluation(rewards: dict[str, list[float]]) -> dict:
    """An `evaluate` result: {state: [reward at seed 0, at seed 1, ...]}."""
    seeds = len(next(iter(rewards.values())))
    return {"spec": "x", "states": list(rewards), "seeds": {
        str(k): [{"state_id": s, "reward": r[k], "headroom": True} for s, r in rewards.items()] for k in range(seeds)}}


START = evaluation({"a": [0.5, 0.5], "b": [-0.3, -0.1], "c": [0.6, 0.4]})
AFTER = evaluation({"a": [0.7, 0.5], "b": [0.1, 0.3], "c": [0.5, 0.5]})


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


def test_the_difference_is_paired_by_seed_with_a_t_interval():
    uniform = {0: 0.5, 1: 0.25, 2: 0.0}
    learnability = {0: 0.75, 1: 0.25, 2: 0.5}
    # differences 0.25, 0, 0.5: mean 0.25, variance (0 + 0.0625 + 0.0625) / 2 = 0.0625, SE 0.25 / sqrt(3)
    # = 0.1443376; t(0.975, 2) = 4.302653: half-width 0.6210344
    out = bench.paired_by_seed(uniform, learnability)
    assert out["diff"] == pytest.approx(0.25) and out["n"] == 3
    assert out["se"] == pytest.approx(0.1443376, abs=1e-7)
    assert (out["ci_low"], out["ci_high"]) == (pytest.approx(0.25 - 0.6210344, abs=1e-6),
                                               pytest.approx(0.25 + 0.6210344, abs=1e-6))
    assert out["per_seed"] == {"0": 0.25, "1": 0.0, "2": 0.5} and (out["up"], out["tied"]) == (2, 1)
    # only seeds both samplers have a value for: seed 1 (a None) and seed 2 (uniform only) drop out
    out = bench.paired_by_seed({0: 0.5, 1: 0.25, 2: 0.0, 3: 1.0}, {0: 0.75, 1: None, 3: 0.5})
    assert out["per_seed"] == {"0": 0.25, "3": -0.5} and out["diff"] == pytest.approx(-0.125)
    # differences 0.25, -0.5: variance (0.375^2 * 2) / 1 = 0.28125, SE sqrt(0.28125 / 2) = 0.375
    assert out["se"] == pytest.approx(0.375)


def line(step: int, group: int, index: int, reward: float | None, outcome: str) -> RolloutLine:
    return RolloutLine(step=step, index=index, group=group, rollout_id=f"r{step}-{index}", state_id="s",
                       task_id="titanic", stage="improve", completion="...", outcome=outcome, reward=reward,
                       components=None, score=None, error=None, cached=False, completion_tokens=3)


def test_run_figures_count_groups_per_step_and_which_carry_no_signal():
    lines = [
        line(0, 0, 0, 0.5, "valid"), line(0, 0, 1, 0.5, "valid"),  # tied
        line(0, 1, 2, 0.5, "valid"), line(0, 1, 3, -0.3, "format_error"),  # not tied: a signal
        line(1, 0, 0, None, "lost"), line(1, 0, 1, -0.2, "execution_error"),  # one scored reward: tied, no valid
        line(2, 0, 0, -0.3, "format_error"), line(2, 0, 1, -0.2, "execution_error"),  # untied, yet no valid
    ]
    out = runs.run_figures(lines)
    # groups are (step, group): step 1's group 0 is not step 0's
    assert out["groups"] == 4 and out["frac_zero_std_groups"] == pytest.approx(2 / 4)
    assert out["frac_groups_no_valid"] == pytest.approx(2 / 4)
    assert out["frac_groups_no_signal"] == pytest.approx(3 / 4)  # all but (0, 1)
    # the scored rewards 0.5, 0.5, 0.5, -0.3, -0.2, -0.3, -0.2: 0.5 / 7
    assert out["reward_per_rollout"] == pytest.approx(0.5 / 7)
    assert (out["rollouts"], out["scored"]) == (8, 7)
    assert out["train_valid_rate"] == pytest.approx(3 / 8) and out["train_format_error_rate"] == pytest.approx(2 / 8)
    assert out["states_drawn"] == 1 and out["frac_groups_redrawn"] == pytest.approx(3 / 4)  # every group on "s"
    other = [line(0, 0, 0, 0.5, "valid"), line(1, 0, 0, 0.5, "valid")]
    other[1] = RolloutLine(**{**other[1].to_dict(), "state_id": "t"})
    assert runs.run_figures(other)["states_drawn"] == 2 and runs.run_figures(other)["frac_groups_redrawn"] == 0.0


def test_groups_are_counted_by_stage_and_by_whether_they_mix_valid_and_failed_rollouts():
    def at(stage, lines):
        return [RolloutLine(**{**x.to_dict(), "stage": stage}) for x in lines]

    lines = [
        *at("improve", [line(0, 0, 0, 0.5, "valid"), line(0, 0, 1, -0.2, "execution_error")]),  # mixed
        *at("improve", [line(0, 1, 2, 0.5, "valid"), line(0, 1, 3, 0.6, "valid")]),  # all valid: not mixed
        *at("debug", [line(1, 0, 0, None, "lost"), line(1, 0, 1, 0.1, "valid")]),  # lost is no failure
        *at("debug", [line(2, 0, 0, -0.3, "format_error"), line(2, 0, 1, -0.1, "invalid_submission")]),
        *at("debug", [line(3, 0, 0, 0.0, "valid"), line(3, 0, 1, -0.1, "invalid_submission")]),  # mixed
    ]
    out = runs.run_figures(lines)
    assert out["frac_groups_debug"] == pytest.approx(3 / 5) and out["frac_groups_mixed_valid"] == pytest.approx(2 / 5)
    assert out["by_stage"] == {
        "debug": {"groups": 3, "frac_no_valid": pytest.approx(1 / 3), "frac_mixed_valid": pytest.approx(1 / 3)},
        "improve": {"groups": 2, "frac_no_valid": 0.0, "frac_mixed_valid": 0.5}}
    assert runs.stage_figures({}, {}) == {"frac_groups_debug": None, "frac_groups_mixed_valid": None, "by_stage": {}}


def test_a_finished_runs_figures_gain_what_was_added_since_and_keep_what_was_stored(tmp_path, monkeypatch):
    stored = {"frac_zero_std_groups": 0.25}
    done = {"seed0": {"arms": {"uniform": {"train": dict(stored)},
                               "learnability": {"train": dict(stored), "reused": {"arm": "grpo"}}}},
            "seed1": {"arms": {"uniform": {"train": dict(stored)}}}}
    for name in ("uniform-seed0", "grpo-seed0", "uniform-seed1"):
        (tmp_path / "runs" / name / "rollouts").mkdir(parents=True)
    read = {"uniform-seed0": {**stored, "frac_groups_debug": 0.5}, "grpo-seed0": {**stored, "frac_groups_debug": 0.75},
            "uniform-seed1": {"frac_zero_std_groups": 0.5, "frac_groups_debug": 0.1}}  # another run: not taken
    monkeypatch.setattr(runs, "train_figures", lambda folder: read[folder.name])
    bench.refresh_train(done, tmp_path)
    assert done["seed0"]["arms"]["uniform"]["train"] == {**stored, "frac_groups_debug": 0.5}
    assert done["seed0"]["arms"]["learnability"]["train"] == {**stored, "frac_groups_debug": 0.75}  # learning's folder
    assert done["seed1"]["arms"]["uniform"]["train"] == stored


def test_partly_successful_groups_are_read_from_the_runs_buffer(tmp_path):
    import sqlite3

    path = tmp_path / "buffer.sqlite"
    assert runs.success_figures(path) == {}  # no buffer
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE events (id INTEGER PRIMARY KEY, step INTEGER, state_id TEXT, success INTEGER)")
        assert runs.success_figures(path) == {"frac_groups_mixed_success": None, "frac_groups_no_success": None}
        # step 0: state a 1 of 2, state b 0 of 2; step 1: state a 2 of 2 (another group than step 0's)
        conn.executemany("INSERT INTO events (step, state_id, success) VALUES (?, ?, ?)",
                         [(0, "a", 1), (0, "a", 0), (0, "b", 0), (0, "b", 0), (1, "a", 1), (1, "a", 1)])
    assert runs.success_figures(path) == {"frac_groups_mixed_success": 1 / 3, "frac_groups_no_success": 1 / 3}


def arm(train: dict, eval_after: dict[str, list[float]], probe_after: dict[str, list[float]], step: str = "4") -> dict:
    def point(per_state):
        return {"per_state": per_state, "mean_reward": runs.mean_reward(evaluation(per_state)),
                "vs_start": runs.compare(START, evaluation(per_state))}

    return {"train": train, "checkpoints": {"2": {"eval": point({"a": [0.0]}), "probe": point({"a": [0.0]})},
                                            step: {"eval": point(eval_after), "probe": point(probe_after)}}}


def test_the_summary_by_hand():
    same = {"a": [0.5], "b": [-0.2], "c": [0.5]}  # state means a 0.5, b -0.2, c 0.5 against START's a 0.5, b -0.2, c 0.5
    done = {
        "seed0": {"arms": {"uniform": arm({"frac_zero_std_groups": 0.5, "frac_groups_no_signal": 0.75}, same, same),
                           "learnability": arm({"frac_zero_std_groups": 0.25, "frac_groups_no_signal": 0.5},
                                               {"a": [0.7], "b": [0.1], "c": [0.5]}, same)}},
        "seed1": {"arms": {"uniform": arm({"frac_zero_std_groups": 0.25, "frac_groups_no_signal": None}, same, same),
                           "learnability": arm({"frac_zero_std_groups": 0.25, "frac_groups_no_signal": 0.5},
                                               {"a": [0.5], "b": [0.3], "c": [0.5]}, same)}},
    }
    s = bench.summarize(done)
    tied = s["samplers"]["uniform"]["frac_zero_std_groups"]
    assert (tied["mean"], tied["sem"], tied["n"]) == (0.375, pytest.approx(0.125), 2)  # |0.5 - 0.25| / 2
    assert s["difference"]["frac_zero_std_groups"]["per_seed"] == {"0": -0.25, "1": 0.0}
    # a figure a run does not have (recorded before it existed) leaves its seed out of both columns and the pair
    assert s["samplers"]["uniform"]["frac_groups_no_signal"]["n"] == s["samplers"]["learnability"][
        "frac_groups_no_signal"]["n"] == 1
    assert s["samplers"]["learnability"]["frac_groups_no_signal"]["per_seed"] == {"0": 0.5}
    assert s["difference"]["frac_groups_no_signal"]["per_seed"] == {"0": -0.25}
    # eval after - start at the LAST checkpoint (4, not 2): learnability seed0 (0.2 + 0.3 + 0) / 3, seed1
    # (0 + 0.5 + 0) / 3, uniform 0 each; the difference 1/6 at both seeds
    assert s["samplers"]["learnability"]["eval_vs_start"]["mean"] == pytest.approx(1 / 6, abs=1e-6)  # mean_sem rounds to 6 places
    assert s["difference"]["eval_vs_start"]["diff"] == pytest.approx(1 / 6)
    # by state, seeds pooled: learnability a [0.7, 0.5], b [0.1, 0.3], c [0.5, 0.5] against uniform's a 0.5,
    # b -0.2, c 0.5 (twice): 0.1, 0.4, 0.0 -> 1/6 over 3 states
    assert s["by_state"]["eval"]["diff"] == pytest.approx(1 / 6) and s["by_state"]["eval"]["n"] == 3
    assert s["by_state"]["probe"]["diff"] == 0.0
    t = bench.table(s)
    assert [r[0] for r in t["rows"]] == [name for _, name in bench.FIGURES] + [
        "eval tasks, by state (seeds pooled)", "probe, by state (seeds pooled)"]
    assert all(len(r) == len(t["columns"]) for r in t["rows"])
    assert t["rows"][0][1:3] == ["0.375 ± 0.125 (n=2)", "0.250 ± 0.000 (n=2)"]
    # tied, learnability - uniform by seed: -0.25, 0: mean -0.125, SE 0.125, t(0.975, 1) 12.7062 -> +-1.5883
    assert t["rows"][0][3] == "-0.125 ± 0.125 [-1.713, +1.463] (n=2)"
    empty = bench.summarize({})
    assert empty["seeds"] == [] and bench.table(empty)["rows"][0][1] == "–"
    # a run whose seed's other run is still to come: a row of its own, in its sampler's column
    alone = {"done": done, "partial": {"seed2": {"uniform": arm({}, same, {"a": [0.7], "b": [-0.2], "c": [0.5]})}}}
    row = bench.results_table(alone)["rows"][-1]
    assert row == ["uniform, seed2 alone (its pair to come): eval / probe after - start", "+0.000 / +0.067", "", ""]


def test_the_learnability_arm_is_learnings_grpo_run_config_for_config():
    """What makes --reuse sound: with the cpu preset (which samples by learnability) learning.py's
    grpo run of a seed and this benchmark's learnability run of it have one TrainConfig; the
    uniform run differs in its sampler only."""
    from mleforge.train.config import TrainConfig

    args = SimpleNamespace(steps=32, evals=1, **{k: None for k in runs.SETTINGS})
    shared = SimpleNamespace(sft="/w/sft", journals="/w/collect/runs")
    base = TrainConfig.preset_config("cpu")
    assert base.sampler.kind == "learnability"
    grpo = learning.run_config(base, shared, args, 2, "grpo").to_dict()
    assert runs.run_config(base, shared, args, 2, bench.ARMS["learnability"]).to_dict() == grpo
    uniform = runs.run_config(base, shared, args, 2, bench.ARMS["uniform"]).to_dict()
    assert uniform["sampler"]["kind"] == "uniform"
    assert {k: v for k, v in uniform.items() if k != "sampler"} == {k: v for k, v in grpo.items() if k != "sampler"}
    assert {k: v for k, v in uniform["sampler"].items() if k != "kind"} == \
        {k: v for k, v in grpo["sampler"].items() if k != "kind"}


def fake_runs(monkeypatch, trained: list[str], fingerprint: dict | None = None):
    """run_arms' heavy parts stood in for: the shared start, the states, the evaluations and the
    runs (the bookkeeping around them is what is tested)."""
    from mleforge.train.config import TrainConfig

    def train_one(config, folder, registry, progress):
        trained.append(folder.name)
        return SimpleNamespace(final_model=str(folder / "final"))

    shared = SimpleNamespace(executor=SimpleNamespace(close=lambda: None), sft="none", journals="j",
                             start_spec="hf:start")
    monkeypatch.setattr(runs, "base_config", lambda args, work: TrainConfig.preset_config("cpu", steps=args.steps))
    monkeypatch.setattr(runs, "shared_start", lambda *a: shared)
    monkeypatch.setattr(runs, "fingerprint", lambda s: fingerprint or {"warm_start_weights_sha256": "w"})
    monkeypatch.setattr(runs, "held_apart_states", lambda *a, **k: ([SimpleNamespace(state_id=s) for s in "abc"], 0))
    monkeypatch.setattr(runs, "eval_task_states", lambda *a: [SimpleNamespace(state_id=s) for s in "abc"])
    def evaluate(sh, spec, *a, **k):  # the start and the uniform runs as START, the others as AFTER
        trained.append("evaluate start") if spec == "hf:start" else None
        return START if spec == "hf:start" or "uniform" in spec else AFTER

    monkeypatch.setattr(runs, "evaluate", evaluate)
    monkeypatch.setattr(runs, "train_figures", lambda folder: {"frac_zero_std_groups": 0.25, "rollouts": 8})
    monkeypatch.setattr(runs, "train_one", train_one)


FLAGS = ["--steps", "4", "--evals", "1", "--eval-seeds", "2", "--probe-states", "3"]


def learning_record(tmp_path, monkeypatch, trained: list[str]) -> Path:
    """learning.py's record of seed 0 (its runs stood in for by `fake_runs`), in tmp_path/w."""
    fake_runs(monkeypatch, trained)
    made = tmp_path / "learning.json"
    learning.run_learning(learning.build_parser().parse_args(
        ["--out", str(made), "--work", str(tmp_path / "w"), *FLAGS, "--seeds", "1"]), registry=object(), progress=False,
        argv=["learning.py"])
    return made


def test_learnings_grpo_runs_are_reused_and_only_the_uniform_runs_are_trained(tmp_path, monkeypatch):
    trained: list[str] = []
    made = learning_record(tmp_path, monkeypatch, trained)
    assert trained == ["evaluate start", "evaluate start", "grpo-seed0", "null-seed0"]  # eval, probe
    assert json.loads(made.read_text())["arms"] == {"grpo": {}, "null": {"shuffle_rewards": True}}
    del trained[:]
    out = tmp_path / "curriculum_real.json"

    def call(*more, seeds="2", reuse=made, to=out):
        args = bench.build_parser().parse_args(["--out", str(to), "--work", str(tmp_path / "w2"), *FLAGS,
                                                "--seeds", seeds, *(["--reuse", str(reuse)] if reuse else []), *more])
        return bench.run_benchmark(args, registry=object(), progress=False, argv=["curriculum_real.py"])

    data = call()
    # seed 0's learnability run is learning.py's grpo run; seed 1 has none there: trained here. The warm
    # start's evaluation is the file's (not sampled again), so both pair with one evaluation of it.
    assert trained == ["uniform-seed0", "uniform-seed1", "learnability-seed1"]
    assert data["start_evaluations"] == json.loads(made.read_text())["start_evaluations"]
    reused = data["done"]["seed0"]["arms"]["learnability"]
    assert reused["reused"]["arm"] == "grpo" and reused["reused"]["file"] == "learning.json"
    assert reused["checkpoints"] == json.loads(made.read_text())["done"]["seed0"]["arms"]["grpo"]["checkpoints"]
    assert "reused" not in data["done"]["seed1"]["arms"]["learnability"]
    # each run names the commit that measured it; a lent run keeps its own, not its file's latest call's
    from _record import commit

    assert data["done"]["seed1"]["arms"]["learnability"]["measured_by"] == commit()
    assert reused["measured_by"] == commit() and "measured_by" not in reused["reused"]
    # learnability's runs evaluate as AFTER, uniform's as START: +1/6 a seed (by hand in the summary test)
    d = data["summary"]["difference"]["eval_vs_start"]
    assert d["per_seed"] == {"0": pytest.approx(1 / 6), "1": pytest.approx(1 / 6)} and d["n"] == 2
    assert data["summary"]["by_state"]["eval"]["diff"] == pytest.approx(1 / 6)
    assert list(data)[:3] == ["benchmark", "meta", "table"]

    # a learning.py file whose runs do not pair with these: refused before anything is trained, with what differs
    saved = json.loads(made.read_text())
    for key, value, message in (("settings", {**saved["settings"], "steps": 8}, r"another settings \(steps: 8 then 4\)"),
                                ("shared_start", {"warm_start_weights_sha256": "x"}, "another shared_start"),
                                ("state_ids", {**saved["state_ids"], "eval": ["a", "b"]}, "another state_ids"),
                                ("arms", {"grpo": {"lr": 1e-5}}, r"none of its arms \(grpo\) runs the config of an "
                                                                 r"arm here \(uniform, learnability\)")):
        other = tmp_path / f"other-{key}.json"
        other.write_text(json.dumps({**saved, key: value}))
        with pytest.raises(ValueError, match=message):
            call(seeds="3", reuse=other, to=tmp_path / f"cr-{key}.json")
    assert trained == ["uniform-seed0", "uniform-seed1", "learnability-seed1"]  # nothing more
    with pytest.raises(ConfigError, match="needs at least 2"):
        call(seeds="1")

    # a run of learning.py's still waiting for its pair (under "partial") is reused too
    partial = tmp_path / "partial.json"
    partial.write_text(json.dumps({**saved, "done": {}, "partial": {"seed0": saved["done"]["seed0"]["arms"]}}))
    del trained[:]
    data = call(reuse=partial, to=tmp_path / "cr-partial.json")
    assert trained == ["uniform-seed0", "uniform-seed1", "learnability-seed1"]
    assert data["done"]["seed0"]["arms"]["learnability"]["reused"]["file"] == "partial.json"


def test_a_lent_run_from_before_runs_named_their_commit_names_its_files_commits():
    saved = {"meta": {"commit": "c3"}, "earlier_meta": [{"commit": "c1"}, {"commit": "c2"}, {"commit": "c1"}]}
    assert bench.measured_by({"measured_by": "c2"}, {}, saved) == {}  # the run names its own
    # which of the file's calls measured it is not known: not the latest one's, but all of them
    assert bench.measured_by({}, {}, saved) == {"measured_by": None, "file_commits": ["c1", "c2", "c3"]}
    assert bench.measured_by({}, {}, {}) == {"measured_by": None, "file_commits": []}
    # lent on by a file that had it from another: that file's commits, never the middle file's
    lent = {"file": "learning.json", "measured_by": None, "file_commits": ["a1", "a2"]}
    assert bench.measured_by({}, lent, saved) == {"measured_by": None, "file_commits": ["a1", "a2"],
                                                  "measured_in": "learning.json"}
    assert bench.measured_by({"measured_by": "c2"}, lent, saved) == {}
    # a record from before: its measured_by was the lending file's latest call's, so it is dropped
    older = {"file": "learning.json", "measured_by": "b5"}
    assert bench.measured_by({}, older, saved) == {"measured_by": None, "file_commits": [],
                                                   "measured_in": "learning.json"}
    twice = {"file": "mid.json", "measured_in": "learning.json", "measured_by": None, "file_commits": ["a1"]}
    assert bench.measured_by({}, twice, saved)["measured_in"] == "learning.json"


def test_a_success_valid_record_takes_the_uniform_runs_of_a_default_one_and_trains_its_own(tmp_path, monkeypatch):
    trained: list[str] = []
    made = learning_record(tmp_path, monkeypatch, trained)

    def call(out, *more):
        args = bench.build_parser().parse_args(["--out", str(out), "--work", str(tmp_path / "w"), *FLAGS,
                                                "--seeds", "2", *more])
        return bench.run_benchmark(args, registry=object(), progress=False, argv=["curriculum_real.py"])

    default = tmp_path / "curriculum_real.json"
    call(default, "--reuse", str(made))
    del trained[:]
    with pytest.raises(ValueError, match="learning.json: none of its arms \\(grpo, null\\) runs the config"):
        call(tmp_path / "valid.json", "--success", "valid", "--reuse", str(default), "--reuse", str(made))
    assert trained == []  # refused before anything ran
    data = call(tmp_path / "valid.json", "--success", "valid", "--reuse", str(default))
    assert trained == ["learnability-valid-seed0", "learnability-valid-seed1"]  # the uniform runs are the default's
    assert data["start_evaluations"] == json.loads(default.read_text())["start_evaluations"]
    assert data["arms"]["learnability"]["learnability"] == {"success": "valid"}
    assert data["folders"] == {"learnability": "learnability-valid"}
    uniform = data["done"]["seed1"]["arms"]["uniform"]["reused"]
    assert (uniform["file"], uniform["arm"], uniform["folder"]) == ("curriculum_real.json", "uniform", "uniform")
    assert "reused" not in data["done"]["seed0"]["arms"]["learnability"]
    # a third file's run kept by the one lent from: its folder is where it was trained
    third = bench.Reuse([default], progress=False)
    results = SimpleNamespace(data=json.loads(default.read_text()))
    third.check(results)
    lent = third.entry(results, "seed0", "learnability", tmp_path / "w")
    assert (lent["reused"]["arm"], lent["reused"]["folder"]) == ("learnability", "grpo")


def test_the_valid_records_own_bookkeeping(tmp_path, monkeypatch):
    """What the --success valid path adds, each part on its own: a wrong --success on an existing
    --out is refused before the shared start is made; a run lent by a file that names its folders
    is read from that folder; figures added since are filled in from the run folders (their
    `folders`) when the file is read; a file paired with another warm-start evaluation is refused."""
    trained: list[str] = []
    fake_runs(monkeypatch, trained)
    out = tmp_path / "valid.json"

    def call(*more, to=out):
        args = bench.build_parser().parse_args(["--out", str(to), "--work", str(tmp_path / "w"), *FLAGS, "--seeds", "2",
                                                *more])
        return bench.run_benchmark(args, registry=object(), progress=False, argv=["curriculum_real.py"])

    data = call("--success", "valid")
    assert trained == ["evaluate start", "evaluate start", "uniform-seed0", "learnability-valid-seed0",
                       "uniform-seed1", "learnability-valid-seed1"]
    assert data["table"]["title"].startswith("uniform vs learnability sampling (its success: valid), 2 seeds")
    assert "groups partly successful, each run's own success (frac)" in [r[0] for r in data["table"]["rows"]]

    made = []
    monkeypatch.setattr(runs, "shared_start", lambda *a: made.append(1))
    with pytest.raises(ValueError, match=r"another arms .* --success"):
        call()  # the default --success on the valid record's --out
    assert made == []  # refused before the shared start

    # figures added since: filled in from each arm's folder (the learnability runs' are learnability-valid-*)
    for name in ("uniform-seed0", "learnability-valid-seed0", "uniform-seed1", "learnability-valid-seed1"):
        (tmp_path / "w" / "runs" / name / "rollouts").mkdir(parents=True)
    monkeypatch.setattr(runs, "train_figures", lambda folder: {"frac_zero_std_groups": 0.25, "rollouts": 8,
                                                               "frac_groups_debug": 0.5 if "valid" in folder.name else 0.1})
    monkeypatch.setattr(runs, "shared_start", lambda *a: SimpleNamespace(
        executor=SimpleNamespace(close=lambda: None), sft="none", journals="j", start_spec="hf:start"))
    data = call("--success", "valid")
    assert data["done"]["seed1"]["arms"]["learnability"]["train"]["frac_groups_debug"] == 0.5
    assert data["done"]["seed0"]["arms"]["uniform"]["train"]["frac_groups_debug"] == 0.1

    # a file lending its learnability-valid runs: read from the folder it names
    reuse = bench.Reuse([out], progress=False)
    other = SimpleNamespace(data=json.loads(out.read_text()))
    reuse.check(other)
    lent = reuse.entry(other, "seed0", "learnability", tmp_path / "w")
    assert (lent["reused"]["arm"], lent["reused"]["folder"]) == ("learnability", "learnability-valid")
    assert lent["train"]["frac_groups_debug"] == 0.5
    # ... and refused where it pairs with another evaluation of the warm start
    moved = json.loads(out.read_text())
    moved["start"]["eval"]["mean_reward"] = 0.99
    (tmp_path / "moved.json").write_text(json.dumps(moved))
    with pytest.raises(ValueError, match="another evaluation of the warm start"):
        bench.Reuse([tmp_path / "moved.json"], progress=False).check(SimpleNamespace(data=json.loads(out.read_text())))


def test_a_reused_file_may_lack_a_field_added_since_at_its_value_before_only():
    data = {"benchmark": "learning", "settings": {"base": {"learnability": {"success": "improve"}, "lr": 5e-5}}}
    older = {"benchmark": "learning", "settings": {"base": {"learnability": {}, "lr": 5e-5}}}
    bench.check_reusable(older, data, Path("l.json"), keys=("settings",))
    bench.check_reusable(data, older, Path("l.json"), keys=("settings",))  # either file may be the older
    valid = {"benchmark": "learning", "settings": {"base": {"learnability": {"success": "valid"}, "lr": 5e-5}}}
    with pytest.raises(ValueError, match="another settings .*success"):
        bench.check_reusable(older, valid, Path("l.json"), keys=("settings",))


@pytest.mark.parametrize("name", ["learning", "curriculum_real", "grpo_sweep", "grpo_sweep_2"])
def test_each_committed_record_continues_under_this_code(name):
    """Every record continued session by session: its own command, parsed by this code, makes the
    settings it holds (but for fields added since at their value before: FIELDS_ADDED), so the
    next call goes on with it, and its stored table is what this code makes of it."""
    from tests.benchmark_module import ROOT

    record = ROOT / "benchmarks" / "results" / f"{name}.json"
    data = json.loads(record.read_text())
    script = data["benchmark"]  # the script that made it (grpo_sweep_2 is grpo_sweep's second record)
    module = {"learning": learning, "curriculum_real": bench, "grpo_sweep": load_benchmark("grpo_sweep")}[script]
    command = data["meta"]["command"].split()
    args = module.build_parser().parse_args(command[command.index(f"benchmarks/{script}.py") + 1:])
    work = Path(args.work).resolve()
    base = runs.as_recorded(runs.base_config(args, work), record, work, progress=False)  # as the call would
    if script == "grpo_sweep":
        made = {"base": base.to_dict(), "groups": args.groups, "val_states": args.val_states,
                "val_seeds": args.val_seeds, "train_seed": args.train_seed, "journals": args.journals}
    else:
        made = runs.arm_settings(base, args)
    settings = runs.portable(json.loads(json.dumps(made, default=str)), work)
    defaults = json.loads(json.dumps(runs.setting_defaults()))
    assert runs.added_at_default(data["settings"], settings, defaults), runs.differences(data["settings"], settings)
    if name == "curriculum_real":  # but for the rows of figures added since (each "–" in a table from before)
        added = {"groups with valid and failed rollouts (frac)", "groups on debug states (frac)"}
        made_now = bench.results_table(data)
        assert made_now["title"] == data["table"]["title"]
        assert [r for r in made_now["rows"] if r[0] not in added] == [r for r in data["table"]["rows"] if r[0] not in added]
    elif name == "learning":
        assert learning.results_table(data) == data["table"]
    else:
        assert module.table(data["done"]) == data["table"]


def test_a_record_continues_with_the_setting_it_was_made_with_where_the_preset_changed_it(tmp_path, monkeypatch):
    """PRESET_CHANGED: a file made before a change of the preset goes on measuring what it
    measured, its runs trained with the value before; a new file takes the preset's new value;
    a file of a third value, or a change not listed, is refused as before."""
    from mleforge.train import config as train_config

    trained: list[str] = []
    made = learning_record(tmp_path, monkeypatch, trained)  # the preset's lr: 5e-5
    assert json.loads(made.read_text())["settings"]["base"]["lr"] == 5e-5
    lrs: dict[str, float] = {}
    stand_in = runs.train_one

    def train_one(config, folder, registry, progress):
        lrs[folder.name] = config.lr
        return stand_in(config, folder, registry, progress)

    monkeypatch.setattr(runs, "train_one", train_one)
    monkeypatch.setitem(train_config.PRESETS, "cpu", {"lr": 1e-5})  # a measurement changed the preset

    def call(out, seeds):
        args = learning.build_parser().parse_args(["--out", str(out), "--work", str(tmp_path / "w"), *FLAGS,
                                                   "--seeds", seeds])
        return learning.run_learning(args, registry=object(), progress=False, argv=["learning.py"])

    with pytest.raises(ValueError, match=r"other settings \(base: base.lr: 5e-05 then 1e-05\)"):
        call(made, "2")  # not listed: refused, nothing trained
    assert lrs == {}
    monkeypatch.setattr(runs, "PRESET_CHANGED", {("base", "lr"): 5e-5})
    data = call(made, "2")
    assert lrs == {"grpo-seed1": 5e-5, "null-seed1": 5e-5}  # the record's value, not the preset's
    assert data["settings"]["base"]["lr"] == 5e-5 and list(data["done"]) == ["seed0", "seed1"]
    fresh = call(tmp_path / "new.json", "1")
    assert fresh["settings"]["base"]["lr"] == 1e-5  # a new file: the preset as it is
    monkeypatch.setattr(runs, "PRESET_CHANGED", {("base", "lr"): 3e-5})
    with pytest.raises(ValueError, match=r"base.lr: 5e-05 then 1e-05"):
        call(made, "3")  # made with neither value
    with pytest.raises(ValueError, match="a setting of the preset is under base"):
        runs.as_recorded(train_config.TrainConfig.preset_config("cpu"), tmp_path / "none.json", tmp_path,
                         {("steps",): 4})  # checked before any file is read


def test_as_recorded_gives_back_only_a_changed_presets_value_the_file_was_made_with(tmp_path, monkeypatch, capsys):
    from mleforge.train import config as train_config

    TrainConfig = train_config.TrainConfig
    out = tmp_path / "r.json"

    def made_with(**base):
        out.write_text(json.dumps({"settings": {"base": base}}))
        return out

    now = TrainConfig.preset_config("cpu")
    assert runs.as_recorded(now, tmp_path / "none.json", tmp_path, {("base", "lr"): 3e-5}) is now  # a new file
    assert runs.as_recorded(now, made_with(lr=5e-5), tmp_path, {("base", "lr"): 5e-5}) is now  # the preset's still
    monkeypatch.setitem(train_config.PRESETS, "cpu", {"lr": 1e-5, "max_new_tokens": 128,
                                                      "seed_stages": ["draft", "debug", "improve"],
                                                      "learnability": {"success": "valid"}})
    now = TrainConfig.preset_config("cpu")
    kept = runs.as_recorded(now, made_with(lr=5e-5), tmp_path, {("base", "lr"): 5e-5})
    assert kept.lr == 5e-5 and kept.replace(lr=1e-5) == now
    assert "continues with the settings it was made with: lr 5e-05 (the preset now: 1e-05)" in capsys.readouterr().err
    # a value given as a flag is the caller's: kept, and refused when the file is opened if it differs
    flagged = TrainConfig.preset_config("cpu", max_new_tokens=96)
    assert runs.as_recorded(flagged, made_with(max_new_tokens=192), tmp_path,
                            {("base", "max_new_tokens"): 192}, progress=False) is flagged
    # tuples as the file holds them (lists); a file from before a FIELDS_ADDED field has its value before
    assert runs.as_recorded(now, made_with(seed_stages=["debug", "improve"]), tmp_path,
                            {("base", "seed_stages"): ("debug", "improve")}, progress=False).seed_stages == (
        "debug", "improve")
    assert runs.as_recorded(now, made_with(learnability={}), tmp_path, {("base", "learnability", "success"): "improve"},
                            progress=False).learnability.success == "improve"
    assert runs.as_recorded(now, made_with(learnability={}), tmp_path, {("base", "learnability", "success"): "other"},
                            progress=False) is now
    with pytest.raises(ValueError, match="TrainConfig has no 'gone' there"):  # a section since removed
        runs.as_recorded(now, made_with(gone={"x": 1}), tmp_path, {("base", "gone", "x"): 1}, progress=False)
    # the refusal of a file lacking a FIELDS_ADDED field at another value names it (it raised KeyError)
    assert runs.without_added({"learnability": {"success": "valid"}}, {"learnability": {}},
                              {"learnability": {"success": "improve"}}) == {"learnability": {"success": "valid"}}


def test_a_folder_holding_a_run_of_another_config_is_refused_not_continued(tmp_path, monkeypatch):
    import yaml

    from mleforge.train import recipe
    from mleforge.train.config import TrainConfig

    asked = TrainConfig.preset_config("cpu", steps=4)
    stored = asked.replace(lr=1e-5, bf16=True).to_dict()  # bf16: resolved by the run (asked: None)
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "config.yaml").write_text(yaml.safe_dump(stored, sort_keys=False))
    resumed = []
    monkeypatch.setattr(recipe, "resume", lambda f, **k: resumed.append(f) or "resumed")
    with pytest.raises(ValueError, match=r"holds a run of another config \(lr: 1e-05 there, 5e-05 asked\)"):
        runs.train_one(asked, folder, object(), False)
    assert resumed == []
    (folder / "config.yaml").write_text(yaml.safe_dump(asked.replace(bf16=True).to_dict(), sort_keys=False))
    assert runs.train_one(asked, folder, object(), False) == "resumed"
    assert runs.config_conflicts({"a": {"b": "ct2"}, "c": 1}, {"a": {"b": "auto"}, "c": None}) == []
    assert runs.config_conflicts({"a": {"b": 2}}, {"a": {"b": 3}}) == ["a.b: 2 there, 3 asked"]


def test_a_reused_arm_is_the_one_of_the_same_train_config():
    """Reuse matches arms by the whole TrainConfig: under the cpu preset (learnability) learning's
    grpo arm is the learnability arm; under a uniform base it would be the uniform arm; the
    null arm is neither; a --success valid record takes only the uniform runs of a default one."""
    from mleforge.train.config import TrainConfig

    base = TrainConfig.preset_config("cpu", steps=4).to_dict()
    learning_arms = {"grpo": {}, "null": {"shuffle_rewards": True}}
    data = {"settings": {"base": base}, "arms": bench.ARMS}
    assert bench.same_config_arms(data, {"arms": learning_arms}) == {"learnability": "grpo"}
    assert bench.same_config_arms(data, {"benchmark": "learning"}) == {"learnability": "grpo"}  # before arms were kept
    assert bench.same_config_arms(data, {"benchmark": "curriculum_real"}) == {}
    uniform_base = {"settings": {"base": {**base, "sampler": {**base["sampler"], "kind": "uniform"}}}, "arms": bench.ARMS}
    assert bench.same_config_arms(uniform_base, {"arms": learning_arms}) == {"uniform": "grpo"}
    valid_arms, folders = bench.arms_for("valid")
    assert valid_arms["learnability"] == {"sampler": {"kind": "learnability"}, "learnability": {"success": "valid"}}
    assert valid_arms["uniform"] == bench.ARMS["uniform"] and folders == {"learnability": "learnability-valid"}
    assert bench.arms_for("improve") == (bench.ARMS, {})
    valid = {"settings": {"base": base}, "arms": valid_arms}
    assert bench.same_config_arms(valid, {"arms": bench.ARMS}) == {"uniform": "uniform"}
    assert bench.same_config_arms(valid, {"arms": learning_arms}) == {}
    with pytest.raises(ValueError, match="holds benchmark 'grpo_sweep'"):
        bench.check_reusable({"benchmark": "grpo_sweep"}, data, Path("l.json"))


def test_a_reused_runs_figures_are_read_again_from_its_folder_only_where_they_agree(tmp_path, monkeypatch):
    folder = tmp_path / "grpo-seed0"
    stored = {"frac_zero_std_groups": 0.25, "rollouts": 8}
    assert bench.reread_train(stored, folder) == stored  # no folder here: as stored
    (folder / "rollouts").mkdir(parents=True)
    monkeypatch.setattr(runs, "train_figures", lambda f: {**stored, "frac_groups_no_signal": 0.5})
    assert bench.reread_train(stored, folder) == {**stored, "frac_groups_no_signal": 0.5}
    monkeypatch.setattr(runs, "train_figures", lambda f: {**stored, "rollouts": 4, "frac_groups_no_signal": 0.5})
    assert bench.reread_train(stored, folder) == stored  # another run in that folder: not taken


ARGV = ("--tiny", "--tasks", "titanic", "--eval-tasks", "penguins", "--seeds", "2", "--steps", "1", "--evals", "1",
        "--group-size", "2", "--expert-steps", "3", "--stepwise-states", "2", "--probe-states", "2", "--eval-seeds", "1",
        "--sft-steps", "1", "--executor", "local", "--generation", "sampled-test", "--threads", "1")


@pytest.mark.slow
def test_the_benchmark_core_on_a_tiny_model(titanic, registry, tmp_path):
    """Real runs: the shared collect and SFT once, 2 seeds x 2 samplers x 1 GRPO step whose
    rollouts execute real scripts (tests/train/engines.py's sampled engine), the evaluation of
    the start and of each run on the same states; then again: nothing is redone."""
    pytest.importorskip("trl")
    from tests.train import engines  # noqa: F401  (registers sampled-test)

    work, out = tmp_path / "work", tmp_path / "out.json"
    args = bench.build_parser().parse_args([*ARGV, "--work", str(work), "--out", str(out)])
    data = bench.run_benchmark(args, registry=registry, progress=False, argv=["curriculum_real.py"])

    assert list(data["done"]) == ["seed0", "seed1"] and data["partial"] == {}
    for key, entry in data["done"].items():
        for sampler in bench.SAMPLERS:
            folder = work / "runs" / f"{sampler}-{key}"
            config = json.loads((folder / "run.json").read_text())
            assert config["status"] == "done" and config["sampler"] == sampler and config["seed"] == entry["seed"]
            assert not (folder / "collect").exists() and not (folder / "sft").exists()  # shared, not per run
            train = entry["arms"][sampler]["train"]
            assert (train["rollouts"], train["groups"]) == (2, 1)  # the same budget for each
            assert set(entry["arms"][sampler]["checkpoints"]["1"]["eval"]["per_state"]) == set(data["state_ids"]["eval"])
    assert data["start_evaluations"]["eval"]["spec"] == f"hf:{work / 'sft' / 'model'}"
    # each figure: the mean over the seeds' runs, the difference seed by seed
    for key, _ in bench.FIGURES:
        values = {s: [bench.run_values(data["done"][f"seed{k}"]["arms"][s])[key] for k in (0, 1)]
                  for s in bench.SAMPLERS}
        for s in bench.SAMPLERS:
            kept = [v for v in values[s] if v is not None]
            assert data["summary"]["samplers"][s][key]["n"] == len(kept)
            if kept:
                assert data["summary"]["samplers"][s][key]["mean"] == pytest.approx(sum(kept) / len(kept))
    saved = json.loads(out.read_text())
    assert saved["table"]["rows"][0][0] == "tied groups (frac)" and saved["summary"] == data["summary"]

    # again: every run is read back (its rollouts untouched), the figures are the same
    stamps = {p: p.stat().st_mtime_ns for p in work.glob("runs/*/rollouts/step-0.jsonl")}
    again = bench.run_benchmark(args, registry=registry, progress=False, argv=["curriculum_real.py"])
    assert len(stamps) == 4 and all(p.stat().st_mtime_ns == t for p, t in stamps.items())
    assert again["summary"] == data["summary"]
    with pytest.raises(ValueError, match=r"other settings \(base, steps: base.steps: 1 then 2; steps: 1 then 2\)"):
        bench.run_benchmark(bench.build_parser().parse_args([*ARGV, "--work", str(work), "--out", str(out),
                                                             "--steps", "2"]), registry=registry, progress=False)


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
    executor = runs.shared_executor(TrainConfig(sandbox={"executor": "auto", "isolation": "none"}), tmp_path)
    try:
        assert isinstance(executor, CachingExecutor) and executor.inner is picked
        assert asked == [{"isolation": "none"}]
        assert (tmp_path / "results.sqlite").is_file()
    finally:
        executor.close()
