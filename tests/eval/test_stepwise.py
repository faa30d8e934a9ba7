"""Step-wise evaluation: the seeded state draw (and its headroom rule), exact rates and SEMs with the
state as the unit on a hand-made case run in the sandbox at two seeds, the template expert end to
end, the CLI and its report section."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from mleforge.agent.execution import ExecutionSummary
from mleforge.agent.journal import Journal
from mleforge.agent.node import Node
from mleforge.agent.state import State
from mleforge.errors import ConfigError
from mleforge.eval.stepwise import (
    StepwiseResult,
    draw_states,
    run_stepwise,
    stepwise_states,
)
from mleforge.grading.grader import sample_submission_score
from mleforge.policies import SamplingConfig
from mleforge.sandbox import make_executor
from tests.agent.scripted import COPY_SAMPLE, CRASH, ScriptedPolicy

FEMALE_SURVIVE = '''Women survive.
```python
import pandas as pd
test = pd.read_csv("input/test.csv")
sub = pd.DataFrame({"PassengerId": test["PassengerId"], "Survived": (test["sex"] == "female").astype(int)})
sub.to_csv("submission/submission.csv", index=False)
```'''
SAMPLING = SamplingConfig(temperature=0.7, max_new_tokens=64, seed=0)


def ran(returncode=0, stderr=""):
    return ExecutionSummary(returncode, False, None, 1.0, "", stderr, returncode == 0)


@pytest.fixture(scope="module")
def titanic(prepared_registry):
    return prepared_registry.get("titanic")


@pytest.fixture(scope="module")
def executor():
    with make_executor("local") as ex:
        yield ex


@pytest.fixture(scope="module")
def expert_dir(prepared_registry, titanic, executor, tmp_path_factory):
    """Template-expert journals of titanic (3 steps), made once."""
    folder = tmp_path_factory.mktemp("stepwise") / "expert"
    stepwise_states([titanic], n_states=1, seed=0, work_dir=folder, registry=prepared_registry, steps=3,
                    executor=executor)
    return folder


def test_rates_and_sems_on_a_hand_made_case(titanic, executor):
    baseline = sample_submission_score(titanic, "public")  # node scores are public scores
    good = Journal("titanic", "higher").add(Node("g", "draft", "copy", "print(1)\n", execution=ran(),
                                                 score=baseline, valid=True))
    top = Journal("titanic", "higher").add(Node("t", "draft", "perfect", "print(2)\n", execution=ran(),
                                                score=1.0, valid=True))
    bad = Journal("titanic", "higher").add(Node("b", "draft", "crash", "raise SystemExit(1)\n",
                                                execution=ran(1, "SystemExit: 1")))
    states = [State.draft("titanic", direction="higher"), State.debug(bad, "b"), State.improve(good, "g"),
              State.improve(top, "t")]
    # generated seed by seed, state by state: seed 0's four completions, then seed 1's
    texts = [COPY_SAMPLE, "I would fix it.", COPY_SAMPLE, COPY_SAMPLE,
             CRASH, COPY_SAMPLE, FEMALE_SURVIVE, CRASH]
    result = run_stepwise(ScriptedPolicy(texts), states, [titanic], executor, sampling=SAMPLING, seeds=(0, 1),
                          batch_size=3)
    r = result.records
    assert [(x.stage, x.seed) for x in r] == [("draft", 0), ("draft", 1), ("debug", 0), ("debug", 1),
                                              ("improve", 0), ("improve", 1), ("improve", 0), ("improve", 1)]
    assert [x.outcome for x in r] == ["valid", "execution_error", "format_error", "valid", "valid", "valid",
                                      "valid", "execution_error"]
    # the last state's best is accuracy 1.0, the metric's perfect value: no headroom
    assert [x.headroom for x in r] == [True] * 6 + [False] * 2
    assert [x.reference for x in r] == [baseline] * 6 + [1.0] * 2
    assert [x.improved for x in r] == [None, None, None, None, False, True, False, False]
    rewards = [x.reward for x in r]
    # same score as the reference: 0.5; a crash -0.2 (r_fail); no code -0.3 (r_format); better: more than 0.5
    assert rewards[:5] == [0.5, -0.2, -0.3, 0.5, 0.5] and rewards[5] > 0.5 and rewards[6] < 0.5
    gain = r[5].delta
    assert gain > 0 and [x.delta for x in r[:5]] == [0.0, None, None, 0.0, 0.0]
    m = result.metrics  # the three states with headroom; each state's two seeds averaged first
    # valid per state [1/2, 1/2, 1]: mean 2/3; deviations -1/6, -1/6, 1/3: variance (1/36 + 1/36 + 4/36) / 2
    # = 1/12, SEM sqrt(1/12 / 3) = 1/6
    assert m["valid_rate"] == {"mean": pytest.approx(2 / 3, abs=1e-6), "sem": pytest.approx(1 / 6), "n": 3}
    # format errors per state [0, 1/2, 0]: mean 1/6, the same spread: SEM 1/6
    assert m["format_error_rate"] == {"mean": pytest.approx(1 / 6, abs=1e-6), "sem": pytest.approx(1 / 6), "n": 3}
    per_state = [(0.5 - 0.2) / 2, (-0.3 + 0.5) / 2, (0.5 + rewards[5]) / 2]
    mean = sum(per_state) / 3
    var = sum((x - mean) ** 2 for x in per_state) / 2
    assert m["mean_reward"] == {"mean": pytest.approx(mean, abs=1e-6), "sem": pytest.approx(math.sqrt(var / 3)),
                                "n": 3}
    # improved on the best: the one improve state with headroom, [0, 1]: 1/2, one state so no SEM
    assert m["improve_rate"] == {"mean": 0.5, "sem": None, "n": 1}
    # score gain: 0 everywhere but the better run (delta > 0): state means [0, 0, gain / 2]
    assert m["score_gain"]["mean"] == pytest.approx(gain / 6, abs=1e-6) and m["score_gain"]["n"] == 3
    flat = result.no_headroom  # apart: the state at the top, valid [1, 0], reward [r6, -0.2]
    assert flat["n_states"] == 1 and flat["states"] == [states[3].state_id]
    assert flat["metrics"]["valid_rate"] == {"mean": 0.5, "sem": None, "n": 1}
    assert flat["metrics"]["mean_reward"]["mean"] == pytest.approx((rewards[6] - 0.2) / 2, abs=1e-6)
    assert result.by_stage["debug"]["format_error_rate"] == {"mean": 0.5, "sem": None, "n": 1}
    assert "improve" in result.by_stage and len(result.by_stage) == 3
    assert result.seeds == (0, 1) and result.states == tuple(s.state_id for s in states)
    saved = result.to_dict()
    assert (saved["format"], saved["k"], saved["n_states"], saved["n_headroom"]) == (2, 2, 4, 3)
    assert StepwiseResult.from_dict(json.loads(json.dumps(saved))) == result
    assert result.sampling == SAMPLING.to_dict() and result.policy == "scripted"
    with pytest.raises(ConfigError, match="distinct"):
        run_stepwise(ScriptedPolicy(texts), states, [titanic], executor, sampling=SAMPLING, seeds=(1, 1))


def test_the_state_draw_is_seeded_and_takes_tasks_in_turn():
    def journal(task_id, n):
        j = Journal(task_id, "higher")
        for i in range(n):  # a draft, then improvements of the node before
            j = j.add(Node(f"{task_id}{i}", "improve" if i else "draft", f"plan {i}", f"print({i})\n", step=i,
                           parent_id=f"{task_id}{i - 1}" if i else None, execution=ran(), score=float(i),
                           valid=True))
        return j

    class T:  # stepwise_states reads only ids
        def __init__(self, id):
            self.id = id

    journals = [journal("a", 4), journal("b", 2)]
    tasks = [T("a"), T("b")]
    first = stepwise_states(tasks, n_states=4, seed=0, journals=journals)
    assert [s.task_id for s in first] == ["a", "b", "a", "b"]
    assert [s.state_id for s in stepwise_states(tasks, n_states=4, seed=0, journals=journals)] == \
        [s.state_id for s in first]
    everything = stepwise_states(tasks, n_states=100, seed=1, journals=journals)
    assert len(everything) == 6 and len({s.state_id for s in everything}) == 6
    assert [s.task_id for s in everything] == ["a", "b", "a", "b", "a", "a"]
    assert {s.state_id for s in everything} >= {s.state_id for s in first}
    only = stepwise_states(tasks, n_states=10, seed=0, journals=journals, stages=("improve",))
    assert {s.stage for s in only} == {"improve"} and len(only) == 4  # a: 3 improve states, b: 1
    with pytest.raises(ConfigError, match="no debug states"):
        stepwise_states(tasks, n_states=3, seed=0, journals=journals, stages=("debug",))
    with pytest.raises(ConfigError, match="n_states"):
        stepwise_states(tasks, n_states=0, seed=0, journals=journals)
    with pytest.raises(ConfigError, match="work_dir"):
        stepwise_states(tasks, n_states=1, seed=0)


@pytest.mark.slow
def test_template_policy_on_expert_states(prepared_registry, titanic, executor, expert_dir):
    from mleforge.expert.policy import TemplatePolicy

    journal_file = next(expert_dir.rglob("journal.json"))
    mtime = journal_file.stat().st_mtime_ns
    states = stepwise_states([titanic], n_states=3, seed=0, work_dir=expert_dir, registry=prepared_registry,
                             steps=3, executor=executor)
    assert journal_file.stat().st_mtime_ns == mtime  # the cached journals were found, not made again
    assert sorted(s.stage for s in states) == ["draft", "draft", "improve"]
    result = run_stepwise(TemplatePolicy(prepared_registry), states, [titanic], executor, sampling=SAMPLING,
                          policy_name="template")
    m = result.metrics
    assert m["format_error_rate"]["mean"] == 0.0 and m["valid_rate"]["mean"] == 1.0
    assert all(r.score is not None for r in result.records) and m["improve_rate"]["n"] == 1


def test_the_draw_drops_states_without_headroom():
    from types import SimpleNamespace

    def journal(task_id, scores):  # a draft, then improvements of the node before
        j = Journal(task_id, "higher")
        for i, score in enumerate(scores):
            j = j.add(Node(f"{task_id}{i}", "improve" if i else "draft", f"plan {i}", f"print({i})\n", step=i,
                           parent_id=f"{task_id}{i - 1}" if i else None, execution=ran(), score=score, valid=True))
        return j

    # the improve states (before each node with a parent) have bests a: 0.8, 1.0, 1.0 (accuracy's perfect
    # value: no headroom); b: 0.9
    tasks = [SimpleNamespace(id="a", spec=SimpleNamespace(metric="accuracy", grade_fn=None)),
             SimpleNamespace(id="b", spec=SimpleNamespace(metric="accuracy", grade_fn=None))]
    journals = [journal("a", [0.8, 1.0, 1.0, 0.7]), journal("b", [0.9, 0.95])]
    draw = draw_states(tasks, n_states=10, seed=0, journals=journals, stages=("improve",))
    bests = {s.state_id: s.journal.best_score for s in draw.states}
    assert sorted(bests.values()) == [0.8, 0.9] and draw.candidates == 4 and len(draw.dropped) == 2
    assert {d[1] for d in draw.dropped} == {"a"}
    saved = draw.to_dict()
    assert (saved["candidates"], saved["drawn"], saved["dropped_no_headroom"], saved["headroom"]) == (4, 2, 2,
                                                                                                      "require")
    prefer = draw_states(tasks, n_states=4, seed=0, journals=journals, stages=("improve",), headroom="prefer")
    assert len(prefer.states) == 4 and prefer.filled == 2 and prefer.dropped == ()
    assert [s.journal.best_score for s in prefer.states[:2]] in ([0.8, 0.9], [0.9, 0.8])
    assert len(draw_states(tasks, n_states=10, seed=0, journals=journals, stages=("improve",),
                           headroom="any").states) == 4
    flat = [journal("a", [1.0, 1.0])]
    with pytest.raises(ConfigError, match="has headroom"):
        draw_states(tasks[:1], n_states=2, seed=0, journals=flat, stages=("improve",))
    with pytest.raises(ConfigError, match="headroom must be"):
        draw_states(tasks, n_states=2, seed=0, journals=journals, headroom="some")


@pytest.mark.slow
def test_cli_writes_result_run_record_contamination_and_report(prepared_registry, data_root, expert_dir,
                                                               tmp_path):
    from mleforge.cli.main import build_parser
    from mleforge.cli.stepwise import cmd_eval_stepwise
    from mleforge.eval.report import write_report

    trained = tmp_path / "train-run"
    trained.mkdir()
    (trained / "run.json").write_text(json.dumps({"kind": "train", "tasks": ["titanic"]}))
    out = tmp_path / "sw"
    args = build_parser().parse_args([
        "eval", "--stepwise", "--states", "2", "--samples", "1", "--journals", str(expert_dir / "journals"),
        "--prompt-profile", "compact", "--policy", "template", "--tasks", "titanic", "--out", str(out),
        "--data-dir", str(data_root), "--json", "--trained-on", str(trained)])
    assert cmd_eval_stepwise(args) == 0
    record = json.loads((out / "run.json").read_text())
    assert record["kind"] == "stepwise" and record["tasks"] == ["titanic"] and len(record["states"]) == 2
    assert "CONTAMINATION" in record["contamination"]["warning"]
    saved = json.loads((out / "stepwise.json").read_text())
    assert saved["n_states"] == 2 and saved["prompt_profile"] == "compact" and saved["seeds"] == [0]
    assert saved["metrics"]["valid_rate"]["mean"] == 1.0 and saved["draw"]["headroom"] == "require"
    assert "CONTAMINATION" in StepwiseResult.from_dict(saved).contamination["warning"]
    report = write_report([out, out], tmp_path / "report", labels=["before", "after"])
    text = Path(report.markdown).read_text(encoding="utf-8")
    assert "Step-wise evaluation" in text and "valid %" in text and "(paired)" in text and "CONTAMINATION" in text


@pytest.mark.slow
def test_cli_compares_two_policies_on_the_same_states_and_seeds(data_root, expert_dir, tmp_path, capsys):
    """`--stepwise --compare A B`: one draw, both policies at the same seeds, the paired table. The
    policies are scripted (the test is about the code around them): A writes no code, B copies the
    sample submission."""
    from mleforge.cli.main import main
    from mleforge.policies.registry import register_policy

    register_policy("scripted", lambda name, **_: ScriptedPolicy([COPY_SAMPLE if name == "copy" else "No code."]),
                    replace=True)
    out = tmp_path / "cmp"
    assert main(["eval", "--stepwise", "--compare", "scripted:none", "scripted:copy", "--states", "2",
                 "--samples", "2", "--journals", str(expert_dir / "journals"), "--tasks", "titanic",
                 "--out", str(out), "--data-dir", str(data_root), "--json"]) == 0
    a, b = (StepwiseResult.from_dict(json.loads((out / x / "stepwise.json").read_text())) for x in "ab")
    assert a.states == b.states and len(a.states) == 2 and a.seeds == b.seeds == (0, 1)
    assert {r.outcome for r in a.records} == {"format_error"} and {r.outcome for r in b.records} == {"valid"}
    saved = json.loads((out / "comparison.json").read_text())
    assert json.loads(capsys.readouterr().out) == saved
    valid, fmt = saved["metrics"]["valid_rate"], saved["metrics"]["format_error_rate"]
    # every state moved from a format error to a valid run: +1 with no spread, so the interval is [1, 1]
    assert (valid["diff"], valid["se"], valid["ci_low"], valid["up"]) == (1.0, 0.0, 1.0, 2)
    assert (fmt["diff"], fmt["down"]) == (-1.0, 2) and saved["label_a"] == "scripted:none"
    assert main(["eval", "--stepwise", "--compare", "template", "template", "--tasks", "titanic"]) == 2
    assert "two different policies" in " ".join(capsys.readouterr().err.split())
    # a later evaluation on the very same states and seeds: --pair-with, then `eval compare`
    again = tmp_path / "again"
    assert main(["eval", "--stepwise", "--policy", "scripted:copy", "--pair-with", str(out / "a"), "--tasks",
                 "titanic", "--states", "2", "--samples", "2", "--sample-seed", "0",  # the folder's: accepted
                 "--out", str(again), "--data-dir", str(data_root), "--json"]) == 0
    later = StepwiseResult.from_dict(json.loads((again / "stepwise.json").read_text()))
    assert later.states == a.states and later.seeds == a.seeds and later.draw["headroom"] == "given"
    capsys.readouterr()
    assert main(["eval", "compare", str(out / "b"), str(again), "--json"]) == 0
    same = json.loads(capsys.readouterr().out)["metrics"]["mean_reward"]
    assert (same["diff"], same["tied"]) == (0.0, 2)  # the same scripted policy: nothing moves
    assert main(["eval", "--stepwise", "--policy", "scripted:copy", "--pair-with", str(out / "a"), "--tasks",
                 "penguins", "--out", str(tmp_path / "x"), "--data-dir", str(data_root)]) == 2
    assert "give --tasks titanic" in " ".join(capsys.readouterr().err.split())


def test_pair_with_refuses_settings_that_conflict_with_the_folders(titanic, data_root, tmp_path, capsys):
    """--pair-with takes the folder's states and seeds: a --samples, --sample-seed, --states or
    --journals given otherwise is refused, naming both values, before anything runs."""
    from mleforge.cli.main import main
    from mleforge.cli.stepwise import pairing_conflicts

    journals = tmp_path / "journals"
    record = {"kind": "stepwise", "tasks": ["titanic"], "states": ["s1", "s2"], "seeds": [3, 4],
              "journals": str(journals)}
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "run.json").write_text(json.dumps(record))
    base = ["eval", "--stepwise", "--policy", "template", "--pair-with", str(tmp_path / "a"), "--tasks", "titanic",
            "--out", str(tmp_path / "b"), "--data-dir", str(data_root)]
    assert main([*base, "--samples", "4", "--sample-seed", "0", "--states", "2"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "--samples is 4 where the folder has 2" in err and "--sample-seed is 0 where the folder has 3" in err
    assert "--states" not in err and "drop them" in err and not (tmp_path / "b" / "run.json").exists()
    equal = {"states": 2, "samples": 2, "sample_seed": 3, "journals": str(journals / ".." / "journals")}
    assert pairing_conflicts(record, {}, equal) == [] and pairing_conflicts(record, equal, {}) == []
    assert pairing_conflicts(record, {"states": 24, "journals": None}, {"samples": 2}) == [
        "states in --config is 24 where the folder has 2"]
    assert pairing_conflicts(record, {"samples": 4}, {"samples": 2}) == []  # the flag overrides the file
    assert pairing_conflicts(record, {}, {"journals": str(tmp_path / "other")}) == [
        f"--journals is {tmp_path / 'other'} where the folder has {journals.resolve()}"]


def test_the_progress_bar_counts_the_states_run(capsys):
    from mleforge.eval.stepwise import record_progress

    with record_progress("step-wise x: generating, then running", 3) as on_record:
        for _ in range(2):
            on_record(None)
    err = capsys.readouterr().err
    assert "step-wise x: generating, then running" in err and "2/3" in err
    with record_progress("quiet", 3, enabled=False) as on_record:
        on_record(None)
    assert "quiet" not in capsys.readouterr().err
