"""benchmarks/grpo_sweep.py and benchmarks/learning.py: their resume bookkeeping, their paired
figures by hand, and the shape of their JSON (the runs themselves are hours: see docs/guide/learning.md)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from tests.benchmark_module import ROOT, load_benchmark

sweep = load_benchmark("grpo_sweep")
learning = load_benchmark("learning")
runs = sweep.shared_runs


def evaluation(rewards: dict[str, list[float]], headroom: dict[str, bool] | None = None) -> dict:
    """An `evaluate` result: {state: [reward at seed 0, at seed 1, ...]}."""
    seeds = len(next(iter(rewards.values())))
    return {"spec": "x", "states": list(rewards), "seeds": {
        str(k): [{"state_id": s, "reward": r[k], "headroom": (headroom or {}).get(s)} for s, r in rewards.items()]
        for k in range(seeds)}}


START = evaluation({"a": [0.5, 0.5], "b": [-0.3, -0.1], "c": [0.6, 0.4]}, headroom={"c": False})
AFTER = evaluation({"a": [0.7, 0.5], "b": [0.1, 0.3], "c": [0.5, 0.5]}, headroom={"c": False})


def done_table(data):
    return {"title": "done", "columns": ["key"], "rows": [[k] for k in data["done"]]}


def sweep_results(path, settings=None, argv=None):
    return runs.Results(path, "grpo_sweep", {"groups": 4} if settings is None else settings, done_table, argv)


def test_results_are_appended_as_each_finishes_and_a_later_call_skips_them(tmp_path):
    path = tmp_path / "out.json"
    first = sweep_results(path)
    assert first.pending(["base", "lr=1e-5"]) == ["base", "lr=1e-5"]
    first.record("base", {"val_mean_reward": 0.25})
    again = sweep_results(path)  # a later call: the file read back
    assert again.pending(["base", "lr=1e-5"]) == ["lr=1e-5"]
    assert json.loads(path.read_text())["done"] == {"base": {"val_mean_reward": 0.25}}
    with pytest.raises(ValueError, match=r"other settings \(groups: groups: 4 then 8\)"):
        sweep_results(path, {"groups": 8})
    with pytest.raises(ValueError, match="holds benchmark 'grpo_sweep', not 'learning'"):
        runs.Results(path, "learning", {"groups": 4}, done_table)
    again.fix("validation_states", ["s1", "s2"])
    sweep_results(path).fix("validation_states", ["s1", "s2"])  # the same: fine
    with pytest.raises(ValueError, match="another validation_states"):
        sweep_results(path).fix("validation_states", ["s1", "s3"])


def test_every_write_is_in_the_results_convention(tmp_path):
    path = tmp_path / "out.json"
    results = sweep_results(path, argv=[str(ROOT / "benchmarks" / "grpo_sweep.py"), "--groups", "4"])
    results.record("base", {"val_mean_reward": 0.25})
    saved = json.loads(path.read_text())
    assert list(saved)[:3] == ["benchmark", "meta", "table"] and saved["benchmark"] == "grpo_sweep"
    assert set(saved["meta"]) == {"command", "date", "commit", "machine"}
    assert saved["meta"]["command"] == "python benchmarks/grpo_sweep.py --groups 4"
    assert saved["table"] == {"title": "done", "columns": ["key"], "rows": [["base"]]}  # what is finished so far
    assert "earlier_meta" not in saved
    later = sweep_results(path, argv=["benchmarks/grpo_sweep.py", "--configs", "lr=1e-5"])
    later.record("lr=1e-5", {"val_mean_reward": 0.5})
    again = json.loads(path.read_text())
    assert again["meta"]["command"] == "python benchmarks/grpo_sweep.py --configs lr=1e-5"
    assert again["earlier_meta"] == [saved["meta"]]  # the first call's pieces keep their commit
    assert again["table"]["rows"] == [["base"], ["lr=1e-5"]]


def test_a_file_written_before_the_convention_is_continued_and_gains_it(tmp_path):
    """The old format (no meta or table until the very end): what a sweep started by an older
    checkout leaves in --out; a later call skips its entries and brings it into the convention."""
    path = tmp_path / "old.json"
    old = {"benchmark": "grpo_sweep", "settings": {"groups": 4}, "done": {"base": {"val_mean_reward": 0.25}},
           "validation_states": ["s1", "s2"]}
    path.write_text(json.dumps(old, indent=1))
    results = sweep_results(path)
    assert results.pending(["base", "lr=1e-5"]) == ["lr=1e-5"]
    results.fix("validation_states", ["s1", "s2"])  # the same states: continued
    saved = json.loads(path.read_text())
    assert {k: saved[k] for k in old} == old and "earlier_meta" not in saved
    assert set(saved["meta"]) == {"command", "date", "commit", "machine"}
    assert saved["table"]["rows"] == [["base"]]


def test_after_minus_start_is_paired_by_state_over_seed_means():
    # state means: start a 0.5, b -0.2, c 0.5; after a 0.6, b 0.2, c 0.5 -> d = 0.1, 0.4, 0.0
    # mean 0.5 / 3 = 0.16667; sd: deviations -0.06667, 0.23333, -0.16667 -> var (0.004444 + 0.054444
    # + 0.027778) / 2 = 0.043333, sd 0.208167, se 0.120185; t(0.975, 2) = 4.302653
    d = runs.compare(START, AFTER)
    assert (d["n"], d["up"], d["down"], d["tied"]) == (3, 2, 0, 1)
    assert d["diff"] == pytest.approx(1 / 6) and d["se"] == pytest.approx(0.120185, abs=1e-6)
    assert d["ci_low"] == pytest.approx(1 / 6 - 4.302653 * 0.120185, abs=1e-5)
    room = runs.compare(START, AFTER, headroom_only=True)  # c has none: a and b, d = 0.1, 0.4
    assert (room["n"], room["diff"]) == (2, pytest.approx(0.25))
    assert runs.mean_reward(START) == pytest.approx((1.0 - 0.4 + 1.0) / 6)
    assert runs.ci_text(d).startswith("+0.167 [") and runs.ci_text({"diff": None}) == "–"


def test_groups_with_no_valid_rollout_are_counted():
    assert runs.frac_no_valid({(0, 0): ["valid", "format_error"], (0, 1): ["execution_error", "timeout"]}) == 0.5
    assert runs.frac_no_valid({}) is None


def test_the_sweep_spends_equal_rollouts_and_refuses_unknown_configurations():
    assert sweep.steps_for(16, {}) == 16 and sweep.steps_for(16, {"groups_per_step": 4}) == 4
    with pytest.raises(SystemExit, match="not a multiple of 4"):
        sweep.steps_for(6, {"groups_per_step": 4})
    assert [n for n, _ in sweep.selected("invalid=raw,base")] == ["base", "invalid=raw"]
    with pytest.raises(SystemExit, match="unknown lr=1"):
        sweep.selected("lr=1")
    assert len(sweep.CONFIGS) == 12 and sweep.CONFIGS[0] == ("base", {})
    assert sweep.CONFIGS[-1] == (sweep.NULL, {}) and sweep.SEED_OFFSET == {sweep.NULL: 1}  # the base, next seed


def test_every_sweep_configuration_is_a_valid_train_config():
    from mleforge.train.config import TrainConfig

    for name, changes in sweep.CONFIGS:
        config = TrainConfig(**changes, steps=sweep.steps_for(16, changes))
        assert config.groups_per_step * config.steps == 16, name


def test_a_sweep_entry_and_its_table_row():
    figures = {"reward_per_rollout": -0.2, "frac_groups_no_valid": 0.75}
    entry = sweep.entry_of("lr=1e-5", {"lr": 1e-5}, 16, START, AFTER, START, figures, 12.34)
    assert entry["vs_start"]["all"] == entry["vs_base"]["all"] == runs.compare(START, AFTER)
    assert (entry["steps"], entry["groups_per_step"], entry["wall_s"]) == (16, 1, 12.3)
    t = sweep.table({"lr=1e-5": entry})
    assert len(t["columns"]) == len(t["rows"][0]) == 8
    assert t["rows"][0][5] == "unresolved"  # the CI of +0.167 over 3 states covers 0
    assert t["rows"][0][:3] == ["lr=1e-5", "16 x 1", f"{runs.mean_reward(AFTER):.3f}"]
    assert t["rows"][0][-1] == "0.750"
    assert json.loads(json.dumps(entry)) == entry  # what --out holds


def test_learning_checkpoints_and_its_runs_config():
    assert learning.checkpoint_steps(32, 4) == [8, 16, 24, 32]
    with pytest.raises(SystemExit, match="multiple of --evals"):
        learning.checkpoint_steps(10, 4)
    from mleforge.train.config import TrainConfig

    args = SimpleNamespace(steps=16, evals=2, lr=1e-5, lr_scheduler=None, warmup=None, groups_per_step=None,
                           scale_rewards=None, beta=None, invalid_groups="zero")
    shared = SimpleNamespace(sft="none", journals="j")
    null = learning.run_config(TrainConfig(), shared, args, 3, "null")
    assert (null.seed, null.steps, null.save_steps, null.save_total_limit, null.lr) == (3, 16, 8, 3, 1e-5)
    assert null.shuffle_rewards and null.invalid_groups == "zero" and null.buffer.retain_evicted_steps == 8
    assert not learning.run_config(TrainConfig(), shared, args, 3, "grpo").shuffle_rewards


def _seed_entry(eval_after: dict[str, list[float]], null_after: dict[str, list[float]]) -> dict:
    def point(per_state):
        return {"eval": {"per_state": per_state, "mean_reward": 0.0,
                         "vs_start": runs.compare(START, evaluation(per_state))},
                "probe": {"per_state": per_state, "mean_reward": 0.0,
                          "vs_start": runs.compare(START, evaluation(per_state))}}

    return {"arms": {"grpo": {"checkpoints": {"4": point(eval_after)}},
                     "null": {"checkpoints": {"4": point(null_after)}}}}


def test_learning_pools_seeds_by_state_and_takes_seeds_as_units_over_seeds():
    start = runs.per_state(START)  # a [0.5, 0.5], b [-0.3, -0.1], c [0.6, 0.4]
    done = {"seed0": _seed_entry({"a": [0.7], "b": [0.1], "c": [0.5]}, {"a": [0.5], "b": [-0.2], "c": [0.5]}),
            "seed1": _seed_entry({"a": [0.5], "b": [0.3], "c": [0.5]}, {"a": [0.5], "b": [-0.2], "c": [0.5]})}
    summary = learning.summarize(done, {"eval": start, "probe": start})
    grpo = summary["arms"]["grpo"]["4"]["eval"]
    # pooled: after means a 0.6, b 0.2, c 0.5: d = 0.1, 0.4, 0.0, as in the paired test above
    assert grpo["pooled"]["diff"] == pytest.approx(1 / 6) and grpo["pooled"]["n"] == 3
    # over seeds: seed0's diff (0.2 + 0.3 + 0.0) / 3 = 0.16667, seed1's (0 + 0.5 + 0) / 3 = 0.16667
    assert grpo["over_seeds"]["diff"] == pytest.approx(1 / 6) and grpo["over_seeds"]["n"] == 2
    assert grpo["over_seeds"]["se"] == pytest.approx(0.0, abs=1e-12)
    # grpo - null by state: null a 0.5, b -0.2, c 0.5 -> 0.1, 0.4, 0.0
    assert summary["grpo_minus_null"]["eval"]["diff"] == pytest.approx(1 / 6)
    t = learning.table(summary)
    assert [r[:2] for r in t["rows"]] == [["grpo", "4"], ["null", "4"], ["grpo - null", "last"], ["grpo - null", "last"]]
    assert all(len(r) == len(t["columns"]) for r in t["rows"])
    assert learning.summarize({}, {"eval": start})["arms"] == {}


def test_the_plot_is_drawn_where_matplotlib_is_installed(tmp_path):
    start = runs.per_state(START)
    done = {"seed0": _seed_entry({"a": [0.7], "b": [0.1], "c": [0.5]}, {"a": [0.5], "b": [-0.2], "c": [0.5]})}
    summary = learning.summarize(done, {"eval": start, "probe": start})
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert learning.plot(summary, tmp_path / "p.png") is None
        return
    assert learning.plot(summary, tmp_path / "p.png") == str(tmp_path / "p.png")
    assert (tmp_path / "p.png").read_bytes()[:4] == b"\x89PNG"


def test_a_change_is_better_or_worse_only_where_its_interval_against_the_base_excludes_zero():
    assert sweep.verdict({"ci_low": 0.01, "ci_high": 0.2}) == "better"
    assert sweep.verdict({"ci_low": -0.3, "ci_high": -0.02}) == "worse"
    assert sweep.verdict({"ci_low": -0.1, "ci_high": 0.2}) == "unresolved"
    assert sweep.verdict({"ci_low": None}) == sweep.verdict(None) == "unresolved"


def test_a_verdict_must_beat_what_a_change_of_training_seed_alone_moves():
    """The intervals hold one training run a side: the null control's config - base (the base at
    the next training seed) is the margin a change's interval must clear, either way."""
    null = {"diff": -0.05, "ci_low": -0.09, "ci_high": -0.01}
    assert sweep.verdict({"ci_low": 0.01, "ci_high": 0.2}, null) == "unresolved"
    assert sweep.verdict({"ci_low": 0.06, "ci_high": 0.2}, null) == "better"
    assert sweep.verdict({"ci_low": -0.3, "ci_high": -0.02}, null) == "unresolved"
    assert sweep.verdict({"ci_low": -0.3, "ci_high": -0.051}, null) == "worse"
    assert sweep.verdict({"ci_low": 0.01, "ci_high": 0.2}, {"diff": None}) == "better"
    d = runs.compare(START, AFTER)  # +0.167 [-0.41, +0.74] over 3 states: wide
    sure = {**d, "ci_low": 0.1, "ci_high": 0.3}
    entry = sweep.entry_of("lr=1e-5", {"lr": 1e-5}, 16, START, AFTER, START, {}, 1.0)
    entry["vs_base"]["all"] = sure
    null_entry = sweep.entry_of(sweep.NULL, {}, 16, START, AFTER, START, {}, 1.0)
    rows = {r[0]: r for r in sweep.table({"lr=1e-5": entry})["rows"]}
    assert rows["lr=1e-5"][5] == "better than 0 (base@seed+1 to come)"  # no null finished: the margin is 0, said
    null_entry["vs_base"]["all"] = {**d, "diff": 0.15}
    rows = {r[0]: r for r in sweep.table({"lr=1e-5": entry, sweep.NULL: null_entry})["rows"]}
    assert rows["lr=1e-5"][5] == "unresolved" and rows[sweep.NULL][5] == "null control"


def test_enough_expert_episodes_are_made_for_the_states_asked():
    # 16 states of 2 tasks from 6-step episodes (<= 5 debug/improve states each): 32 / 10 -> 4 a task
    assert runs.episodes_for(16, 2, 6) == 4 and runs.episodes_for(2, 6, 6) == 1 and runs.episodes_for(3, 1, 1) == 6


def test_a_configuration_finished_before_the_base_gets_its_comparison_when_the_base_is_done(tmp_path):
    (tmp_path / "evals").mkdir()
    (tmp_path / "evals" / "base.json").write_text(json.dumps(START))
    (tmp_path / "evals" / "groups-per-step=4.json").write_text(json.dumps(AFTER))
    results = sweep_results(tmp_path / "out.json", {})
    results.record("groups/step=4", {"vs_base": None})
    states = [SimpleNamespace(state_id=s) for s in START["states"]]
    sweep.fill_vs_base(results, tmp_path, states, [0, 1])
    saved = json.loads((tmp_path / "out.json").read_text())["done"]["groups/step=4"]
    assert saved["vs_base"]["all"] == runs.compare(START, AFTER)


def test_held_apart_states_leave_out_the_buffer_seeds_and_refuse_an_empty_set():
    candidates = [SimpleNamespace(state_id=s) for s in ("a", "b", "c")]
    assert [s.state_id for s in runs.held_apart(candidates, {"b"})] == ["a", "c"]
    with pytest.raises(ValueError, match="none of the 3 held-apart candidate states"):
        runs.held_apart(candidates, {"a", "b", "c"})


def test_grpo_minus_null_over_seeds_pairs_each_seeds_runs():
    """Each seed's after - start of its grpo run less its null run's, the seed as the unit:
    seed0 1/6 - 0, seed1 1/6 - 0.1/3; mean 0.15, SE 0.023570 / sqrt(2) = 0.016667, t(0.975, 1) 12.7062."""
    start = runs.per_state(START)
    done = {"seed0": _seed_entry({"a": [0.7], "b": [0.1], "c": [0.5]}, {"a": [0.5], "b": [-0.2], "c": [0.5]}),
            "seed1": _seed_entry({"a": [0.5], "b": [0.3], "c": [0.5]}, {"a": [0.6], "b": [-0.2], "c": [0.5]})}
    summary = learning.summarize(done, {"eval": start, "probe": start})
    d = summary["grpo_minus_null_over_seeds"]["eval"]
    assert (d["n"], d["diff"], d["se"]) == (2, pytest.approx(0.15), pytest.approx(1 / 60))
    assert (d["ci_low"], d["ci_high"]) == (pytest.approx(0.15 - 12.7062047 / 60), pytest.approx(0.15 + 12.7062047 / 60))
    eval_row = [r for r in learning.table(summary)["rows"] if r[0] == "grpo - null" and r[2]][0]
    assert eval_row[3].startswith("+0.150 [-0.062, +0.362] (n=2")


def test_the_probe_set_is_drawn_apart_from_the_sweeps_validation_set():
    """learning.py's probe states come from episodes (and a folder) of their own, so that its
    probe figure is not measured on the states grpo_sweep chose the settings on."""
    (val_dir, val_seed), (probe_dir, probe_seed) = runs.HELD_APART["validation"], runs.HELD_APART["probe"]
    assert val_dir != probe_dir and abs(probe_seed - val_seed) >= 100  # --eval-seed shifts both by a few


def test_learnings_table_is_of_the_seeds_finished_so_far():
    """Written at every write: empty before the warm start is evaluated, then the summary's."""
    assert learning.results_table({"done": {}})["rows"] == []
    start = runs.per_state(START)
    done = {"seed0": _seed_entry({"a": [0.7], "b": [0.1], "c": [0.5]}, {"a": [0.5], "b": [-0.2], "c": [0.5]})}
    data = {"done": done, "start": {name: {"per_state": start} for name in ("eval", "probe")}}
    assert learning.results_table(data) == learning.table(learning.summarize(done, {"eval": start, "probe": start}))
    assert learning.results_table(data)["rows"][0][:2] == ["grpo", "4"]


def test_an_evaluation_samples_at_the_cap_asked_and_redoes_one_saved_at_another(tmp_path, monkeypatch):
    """evaluate's bookkeeping around the step-wise run (stood in for here; the run itself is
    tests/eval's): the cap a configuration asks for reaches the sampling, and a saved evaluation
    at another cap is not taken for it."""
    import mleforge.eval.stages as stages
    import mleforge.eval.stepwise as stepwise
    from mleforge.policies.base import SamplingConfig
    from mleforge.train import recipe

    caps = []

    def run_stepwise(policy, states, tasks, executor, *, sampling, seeds, **_):
        caps.append((sampling.max_new_tokens, seeds))
        records = [SimpleNamespace(to_dict=lambda s=s: {"state_id": s.state_id, "reward": 0.1}) for s in states]
        return SimpleNamespace(records=records)

    settings = SimpleNamespace(sampling=SamplingConfig(temperature=0.7, max_new_tokens=192), policy_options={},
                               prompt=None, reward=None, workers=1, run_timeout_s=60)
    monkeypatch.setattr(recipe, "stage_settings", lambda plan: settings)
    monkeypatch.setattr(stages, "make_local_policy", lambda spec, options: SimpleNamespace(close=lambda: None))
    monkeypatch.setattr(stepwise, "run_stepwise", run_stepwise)
    shared = SimpleNamespace(plan=SimpleNamespace(tasks=(), eval_tasks=()), executor=None)
    states, path = [SimpleNamespace(state_id="a")], tmp_path / "e.json"
    runs.evaluate(shared, "hf:m", states, [0, 1], path)
    assert caps == [(192, (0,)), (192, (1,))]  # the base plan's cap, one call a seed
    assert runs.evaluate(shared, "hf:m", states, [0, 1], path)["seeds"]["1"] == [{"state_id": "a", "reward": 0.1}]
    assert len(caps) == 2  # read back, not redone
    longer = runs.evaluate(shared, "hf:m", states, [0], path, max_new_tokens=256)
    assert caps[2:] == [(256, (0,))] and longer["max_new_tokens"] == 256  # another cap: evaluated anew
    assert json.loads(path.read_text())["max_new_tokens"] == 256


def test_a_later_call_with_a_fresh_work_keeps_the_runs_evaluated_and_pairs_only_with_the_same_start(
        tmp_path, monkeypatch):
    """learning.py's bookkeeping across calls that share only --out (the runs and evaluations,
    hours each, stood in for here): a run evaluated before a kill is not run again, its seed is
    finished by the next call, and a call whose shared start or warm-start evaluation came out
    otherwise is refused before it trains anything."""
    from mleforge.train.config import TrainConfig

    class Killed(Exception):
        pass

    trained, kill, made = [], set(), {"fingerprint": {"warm_start_weights_sha256": "w", "buffer_seed_states_sha256": "s"},
                                      "start": START}

    def train_one(config, folder, registry, progress):
        if folder.name in kill:
            raise Killed(folder.name)
        trained.append(folder.name)
        return SimpleNamespace(final_model=str(folder / "final"))

    closed = []
    shared = SimpleNamespace(executor=SimpleNamespace(close=lambda: closed.append(1)), sft="none", journals="j",
                             start_spec="hf:start")
    monkeypatch.setattr(runs, "base_config", lambda args, work: TrainConfig())
    monkeypatch.setattr(runs, "shared_start", lambda *a: shared)
    monkeypatch.setattr(runs, "fingerprint", lambda s: made["fingerprint"])
    monkeypatch.setattr(runs, "held_apart_states", lambda *a, **k: ([SimpleNamespace(state_id=s) for s in "abc"], 0))
    monkeypatch.setattr(runs, "eval_task_states", lambda *a: [SimpleNamespace(state_id=s) for s in "abc"])
    monkeypatch.setattr(runs, "evaluate", lambda sh, spec, *a, **k: made["start"] if spec == "hf:start" else AFTER)
    monkeypatch.setattr(runs, "train_figures", lambda folder: {"rollouts": 8})
    monkeypatch.setattr(runs, "train_one", train_one)
    out = tmp_path / "learning.json"

    def call(work, seeds=1):
        args = learning.build_parser().parse_args(["--out", str(out), "--work", str(tmp_path / work), "--steps", "4",
                                                   "--evals", "2", "--seeds", str(seeds), "--eval-seeds", "2"])
        return learning.run_learning(args, registry=object(), progress=False, argv=["learning.py"])

    kill.add("null-seed0")
    with pytest.raises(Killed):
        call("w1")
    saved = json.loads(out.read_text())
    assert trained == ["grpo-seed0"] and saved["done"] == {} and list(saved["partial"]["seed0"]) == ["grpo"]
    assert [r[:2] for r in saved["table"]["rows"]] == [["grpo, seed0 alone (its pair to come)", "2"],
                                                       ["grpo, seed0 alone (its pair to come)", "4"]]
    assert saved["table"]["rows"][1][2].startswith("+0.167 [")  # AFTER - START, as below
    assert ", no seed finished yet: its runs alone;" in saved["table"]["title"]
    assert saved["shared_start"] == made["fingerprint"] and closed == [1]

    kill.clear()
    data = call("w2")  # another session: a fresh --work, the same shared start
    assert trained == ["grpo-seed0", "null-seed0"]  # the grpo run evaluated before is kept, not run again
    assert list(data["done"]) == ["seed0"] and data["partial"] == {}
    assert set(data["done"]["seed0"]["arms"]) == {"grpo", "null"}
    grpo = data["done"]["seed0"]["arms"]["grpo"]["checkpoints"]["4"]["eval"]
    assert grpo["vs_start"]["diff"] == pytest.approx(1 / 6)  # AFTER - START by hand above
    assert [r[:2] for r in data["table"]["rows"]][:2] == [["grpo", "2"], ["grpo", "4"]]

    made["fingerprint"] = {"warm_start_weights_sha256": "other", "buffer_seed_states_sha256": "s"}
    with pytest.raises(ValueError, match="another shared_start .* warm_start_weights_sha256: \"w\" then \"other\""):
        call("w3", seeds=2)
    assert trained == ["grpo-seed0", "null-seed0"]  # the refused call trained nothing
    made["fingerprint"] = {"warm_start_weights_sha256": "w", "buffer_seed_states_sha256": "s"}
    made["start"] = AFTER  # were the warm start sampled again, every difference would be 0
    data = call("w4", seeds=2)
    assert trained == ["grpo-seed0", "null-seed0", "grpo-seed1", "null-seed1"]
    assert data["done"]["seed1"]["arms"]["grpo"]["checkpoints"]["4"]["eval"]["vs_start"]["diff"] == pytest.approx(1 / 6)
    assert data["start_evaluations"]["eval"]["seeds"]["0"][2] == {"state_id": "c", "reward": 0.6, "headroom": False}


def test_the_fingerprint_hashes_the_weights_under_the_warm_start_and_the_buffers_seed_states(tmp_path, monkeypatch):
    import hashlib

    from mleforge.policies.model_source import write_marker

    base = tmp_path / "base"
    base.mkdir()
    (base / "model.safetensors").write_bytes(b"base weights")
    adapter = tmp_path / "final"
    adapter.mkdir()
    (adapter / "adapter_model.safetensors").write_bytes(b"weights")
    (adapter / "adapter_config.json").write_text("{}")  # not a weight file: left out
    write_marker(adapter, weights="adapter", base=f"hf:{base}")
    monkeypatch.setattr(runs, "train_states_ids", lambda plan, journals: {"s2", "s1"})
    shared = SimpleNamespace(start_spec=f"hf:{adapter}", plan=None, journals="j")
    got = runs.fingerprint(shared)
    base_sha = hashlib.sha256(b"model.safetensors\0base weights").hexdigest()
    assert got == {"version": 2,
                   "warm_start_weights_sha256": hashlib.sha256(
                       b"adapter_model.safetensors\0weights" + b"\0base\0" + base_sha.encode()).hexdigest(),
                   "buffer_seed_states_sha256": hashlib.sha256(b"s1\ns2").hexdigest()}
    (base / "model.safetensors").write_bytes(b"base weightz")  # the adapter as it was, on another base
    assert runs.fingerprint(shared)["warm_start_weights_sha256"] != got["warm_start_weights_sha256"]
    # a bundled model by its conversion: the GGUF's SHA-256 and how it is converted
    import mleforge.policies.model_source as model_source

    monkeypatch.setattr(model_source, "base_weights", lambda spec: {"gguf_sha256": "g", "embeddings": "tied"})
    tied = runs.weights_sha256("bundled:qwen2.5-coder-0.5b")
    monkeypatch.setattr(model_source, "base_weights", lambda spec: {"gguf_sha256": "g", "embeddings": None})
    assert runs.weights_sha256("bundled:qwen2.5-coder-0.5b") != tied


def test_settings_and_states_say_where_they_differ():
    assert runs.differences({"a": {"b": 1, "c": 2}}, {"a": {"b": 1, "c": 3}}) == "a.c: 2 then 3"
    assert runs.differences([1], [2]) == "the value: [1] then [2]"
    assert runs.differences({"x": 1}, {"x": 1}) == "equal"


def test_only_a_path_inside_the_work_folder_becomes_work(tmp_path):
    work = tmp_path / "wk"
    got = runs.portable({"spec": f"hf:{work}/tiny", "sft": f"{work}2/sft", "work": str(work), "n": [str(work / "a")]},
                        work)
    assert got == {"spec": "hf:<work>/tiny", "sft": f"{work}2/sft", "work": "<work>", "n": ["<work>/a"]}


def test_settings_name_the_work_folder_so_that_another_work_continues_them(tmp_path):
    def results(work, spec="tiny-model"):
        settings = {"base": {"model": {"spec": f"hf:{tmp_path / work / spec}"}}, "groups": 4}
        return runs.Results(tmp_path / "r.json", "grpo_sweep", settings, done_table, work=tmp_path / work)

    first = results("w1")
    first.record("base", {"x": 1})
    assert json.loads((tmp_path / "r.json").read_text())["settings"]["base"]["model"]["spec"] == "hf:<work>/tiny-model"
    assert results("w2").done == {"base": {"x": 1}}  # a fresh --work, the same settings
    with pytest.raises(ValueError, match="other settings .base."):
        results("w3", spec="another-model")


def test_a_shared_start_nothing_measured_depends_on_is_not_held_against_the_next_call(tmp_path, monkeypatch):
    """A first call killed before any run was evaluated leaves its fingerprint and warm-start
    evaluation in --out; the next call, whose shared start came out otherwise, takes its own
    instead of being refused."""
    from mleforge.train.config import TrainConfig

    made = {"fingerprint": {"warm_start_weights_sha256": "old"}, "start": START}

    def train_one(config, folder, registry, progress):
        raise KeyboardInterrupt

    shared = SimpleNamespace(executor=SimpleNamespace(close=lambda: None), sft="none", journals="j", start_spec="hf:s")
    monkeypatch.setattr(runs, "base_config", lambda args, work: TrainConfig())
    monkeypatch.setattr(runs, "shared_start", lambda *a: shared)
    monkeypatch.setattr(runs, "fingerprint", lambda s: made["fingerprint"])
    monkeypatch.setattr(runs, "held_apart_states", lambda *a, **k: ([SimpleNamespace(state_id=s) for s in "abc"], 0))
    monkeypatch.setattr(runs, "eval_task_states", lambda *a: [SimpleNamespace(state_id=s) for s in "abc"])
    monkeypatch.setattr(runs, "evaluate", lambda sh, spec, *a, **k: made["start"])
    monkeypatch.setattr(runs, "train_one", train_one)
    out = tmp_path / "learning.json"

    def call(work):
        args = learning.build_parser().parse_args(["--out", str(out), "--work", str(tmp_path / work), "--steps", "2",
                                                   "--evals", "1", "--seeds", "1"])
        return learning.run_learning(args, registry=object(), progress=False, argv=["learning.py"])

    with pytest.raises(KeyboardInterrupt):
        call("w1")
    made.update(fingerprint={"warm_start_weights_sha256": "new"}, start=AFTER)
    with pytest.raises(KeyboardInterrupt):
        call("w2")
    saved = json.loads(out.read_text())
    assert saved["shared_start"] == {"warm_start_weights_sha256": "new"}
    assert saved["start"]["eval"]["per_state"] == runs.per_state(AFTER)  # sampled again: nothing depended on it


def test_the_sweep_continues_from_out_alone_with_the_same_shared_start(tmp_path, monkeypatch):
    """grpo_sweep keeps each validation evaluation in --out: a later call with a fresh --work (another
    session) compares its configurations with the base evaluated by an earlier one; another shared
    start is refused, and a record from before the evaluations were kept continues in its --work only."""
    from mleforge.train.config import TrainConfig

    other = evaluation({"a": [0.5, 0.7], "b": [0.3, 0.3], "c": [0.5, 0.5]}, headroom={"c": False})
    trained, made = [], {"fingerprint": {"warm_start_weights_sha256": "w"}}

    def train_one(config, folder, registry, progress):
        trained.append(folder.name)
        return SimpleNamespace(final_model=str(folder / "final"))

    def evaluate(shared, spec, states, seeds, path, max_new_tokens=None):
        trained.append(f"evaluate {spec.split('/')[-2] if '/' in spec else spec}")
        return {"hf:start": START}.get(spec) or (AFTER if "/base/" in spec else other)

    shared = SimpleNamespace(executor=SimpleNamespace(close=lambda: None), sft="none", journals="j",
                             start_spec="hf:start")
    monkeypatch.setattr(runs, "base_config", lambda args, work: TrainConfig())
    monkeypatch.setattr(runs, "shared_start", lambda *a: shared)
    monkeypatch.setattr(runs, "fingerprint", lambda s: made["fingerprint"])
    monkeypatch.setattr(runs, "held_apart_states", lambda *a, **k: ([SimpleNamespace(state_id=s) for s in "abc"], 0))
    monkeypatch.setattr(runs, "evaluate", evaluate)
    monkeypatch.setattr(runs, "train_figures", lambda folder: {"rollouts": 8})
    monkeypatch.setattr(runs, "train_one", train_one)
    out = tmp_path / "sweep.json"

    def call(work, configs):
        args = sweep.build_parser().parse_args(["--out", str(out), "--work", str(tmp_path / work), "--groups", "4",
                                                "--val-states", "3", "--val-seeds", "2", "--configs", configs])
        return sweep.run_sweep(args, registry=object(), progress=False, argv=["grpo_sweep.py"])

    call("w1", "base")
    assert trained == ["evaluate hf:start", "base", "evaluate base"]
    data = call("w2", "lr=1e-5")  # another session: a fresh --work
    assert trained[3:] == ["lr=1e-5", "evaluate lr=1e-5"]  # the warm start and the base: read from --out
    assert data["done"]["lr=1e-5"]["vs_base"]["all"] == runs.compare(AFTER, other)
    assert data["done"]["lr=1e-5"]["vs_start"]["all"] == runs.compare(START, other)
    assert set(data["evaluations"]) == {"start", "base", "lr=1e-5"}

    made["fingerprint"] = {"warm_start_weights_sha256": "other"}
    with pytest.raises(ValueError, match="another shared_start"):
        call("w3", "lr=5e-6")
    assert "lr=5e-6" not in trained

    saved = json.loads(out.read_text())  # as a record from before: its evaluations in its --work only
    del saved["evaluations"]
    out.write_text(json.dumps({**saved, "work": str(tmp_path / "w1")}))
    made["fingerprint"] = {"warm_start_weights_sha256": "w"}
    with pytest.raises(ValueError, match="another work folder"):
        call("w4", "lr=5e-6")


def stand_in_sweep(monkeypatch, base_config, trained) -> None:
    """run_sweep's heavy parts stood in for: `base_config(args, work)` is the base, `trained(config,
    folder)` is told of each run; the shared start, the states and the evaluations are fixed."""
    def train_one(config, folder, *a):
        trained(config, folder)
        return SimpleNamespace(final_model=str(folder / "final"))

    monkeypatch.setattr(runs, "base_config", base_config)
    monkeypatch.setattr(runs, "shared_start", lambda *a: SimpleNamespace(
        executor=SimpleNamespace(close=lambda: None), sft="none", journals="j", start_spec="hf:start"))
    monkeypatch.setattr(runs, "fingerprint", lambda s: {"warm_start_weights_sha256": "w"})
    monkeypatch.setattr(runs, "held_apart_states", lambda *a, **k: ([SimpleNamespace(state_id=s) for s in "abc"], 0))
    monkeypatch.setattr(runs, "evaluate", lambda sh, spec, *a, **k: START if spec == "hf:start" else AFTER)
    monkeypatch.setattr(runs, "train_figures", lambda folder: {"rollouts": 8})
    monkeypatch.setattr(runs, "train_one", train_one)


def test_a_configuration_that_computes_the_base_is_recorded_as_such_and_not_trained(tmp_path, monkeypatch):
    """scale_rewards batch divides by the step's std; with one group per optimizer step that is the
    group's, so the run would be the base again: it is recorded, shown, and not trained."""
    from mleforge.train.config import TrainConfig

    base = TrainConfig()
    assert base.groups_per_step == 1 and base.scale_rewards == "group"
    assert "group's std" in sweep.same_as_base({"scale_rewards": "batch"}, base)
    assert sweep.same_as_base({"scale_rewards": "batch", "groups_per_step": 4}, base) is None
    assert sweep.same_as_base({"scale_rewards": "batch"}, base.replace(groups_per_step=4)) is None
    assert sweep.same_as_base({"scale_rewards": "none"}, base) is None
    assert all(sweep.same_as_base(c, base) is None for n, c in sweep.CONFIGS if n != "scale=batch")

    trained = []
    stand_in_sweep(monkeypatch, lambda args, work: base, lambda config, folder, *a: trained.append(folder.name))
    args = sweep.build_parser().parse_args(["--out", str(tmp_path / "s.json"), "--work", str(tmp_path / "w"),
                                            "--groups", "4", "--val-states", "3", "--val-seeds", "2",
                                            "--configs", "base,scale=batch"])
    data = sweep.run_sweep(args, registry=object(), progress=False, argv=["grpo_sweep.py"])
    assert trained == ["base"]
    assert data["done"]["scale=batch"]["same_as_base"].startswith("scale_rewards batch at 1 group")
    rows = {r[0]: r for r in data["table"]["rows"]}
    assert rows["scale=batch"][5].startswith("not run: scale_rewards batch") and rows["scale=batch"][1] == "–"
    assert rows["base"][5] == "base"


def test_a_field_added_to_the_code_since_a_file_was_made_continues_it_at_its_default_only(tmp_path):
    saved = {"base": {"lr": 5e-5, "learnability": {"variant": "beta"}}, "steps": 32}
    defaults = {"base": {"lr": 1e-4, "learnability": {"variant": "beta", "success": "improve"}}}
    now = {"base": {"lr": 5e-5, "learnability": {"variant": "beta", "success": "improve"}}, "steps": 32}
    assert runs.added_at_default(saved, now, defaults)
    assert not runs.added_at_default(saved, {**now, "base": {**now["base"], "learnability": {
        "variant": "beta", "success": "valid"}}}, defaults)  # added, but not at its default
    assert not runs.added_at_default(saved, {**now, "base": {**now["base"], "lr": 1e-5}}, defaults)
    assert not runs.added_at_default(now, saved, defaults)  # a field gone from the code
    assert not runs.added_at_default(saved, {**now, "new": 1}, defaults)  # no default known for it
    path = tmp_path / "r.json"
    runs.Results(path, "grpo_sweep", saved, done_table).write()
    kept = runs.Results(path, "grpo_sweep", now, done_table, defaults=defaults)
    assert kept.data["settings"] == saved  # the file's settings stay as they were
    with pytest.raises(ValueError, match=r"made with other settings \(base: base.lr: 5e-05 then 1e-05\)"):
        runs.Results(path, "grpo_sweep", {**now, "base": {**now["base"], "lr": 1e-5}}, done_table, defaults=defaults)


def test_a_sweep_record_continues_with_the_setting_it_was_made_with_where_the_preset_changed_it(tmp_path,
                                                                                               monkeypatch):
    """grpo_sweep opens its --out as run_arms does (`as_recorded`): after a change of the preset
    listed in PRESET_CHANGED, its next configurations are trained around the base it was made
    with; unlisted, the change is refused before anything runs."""
    from mleforge.train import config as train_config

    trained: dict[str, tuple[float, float]] = {}

    stand_in_sweep(monkeypatch, lambda args, work: train_config.TrainConfig.preset_config("cpu"),
                   lambda config, folder, *a: trained.__setitem__(folder.name, (config.beta, config.lr)))

    def call(configs):
        args = sweep.build_parser().parse_args(["--out", str(tmp_path / "s.json"), "--work", str(tmp_path / "w"),
                                                "--groups", "4", "--val-states", "3", "--val-seeds", "2",
                                                "--configs", configs])
        return sweep.run_sweep(args, registry=object(), progress=False, argv=["grpo_sweep.py"])

    call("base")
    assert list(trained.values()) == [(0.0, 5e-5)]
    monkeypatch.setitem(train_config.PRESETS, "cpu", {"beta": 0.04})
    with pytest.raises(ValueError, match=r"other settings \(base: base.beta: 0.0 then 0.04\)"):
        call("lr=1e-5")
    assert len(trained) == 1
    monkeypatch.setattr(runs, "PRESET_CHANGED", {("base", "beta"): 0.0})
    data = call("lr=1e-5")
    assert len(trained) == 2 and list(trained.values())[1] == (0.0, 1e-5)  # around the base it was made with
    assert data["settings"]["base"]["beta"] == 0.0
