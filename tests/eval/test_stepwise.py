"""Step-wise evaluation: the seeded state draw, exact rates and SEMs on a hand-made case run in the
sandbox, the template expert end to end, the before/after table, the CLI and its report section."""

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
    COMPARE_COLUMNS,
    StepwiseRecord,
    StepwiseResult,
    compare_stages,
    compare_stepwise,
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
    bad = Journal("titanic", "higher").add(Node("b", "draft", "crash", "raise SystemExit(1)\n",
                                                execution=ran(1, "SystemExit: 1")))
    states = [State.draft("titanic", direction="higher"), State.draft("titanic", direction="higher"),
              State.debug(bad, "b"), State.improve(good, "g"), State.improve(good, "g")]
    texts = [COPY_SAMPLE, CRASH, "I would fix it.", COPY_SAMPLE.replace("rows", "lines"), FEMALE_SURVIVE]
    result = run_stepwise(ScriptedPolicy(texts), states, [titanic], executor, sampling=SAMPLING, batch_size=2)
    outcomes = [r.outcome for r in result.records]
    assert outcomes == ["valid", "execution_error", "format_error", "valid", "valid"]
    assert [r.improved for r in result.records] == [None, None, None, False, True]
    # the expert's best is the sample submission's accuracy, below a perfect 1.0
    assert [r.headroom for r in result.records] == [None, None, None, True, True]
    rewards = [r.reward for r in result.records]
    # same score: 0.5; a crash -0.2 (r_fail); no code -0.3 (r_format); better: more than 0.5
    assert rewards[:4] == [0.5, -0.2, -0.3, 0.5] and rewards[4] > 0.5
    m = result.metrics
    # format errors [0, 0, 1, 0, 0]: mean 0.2, sample variance (4 * 0.04 + 0.64) / 4 = 0.2, SEM sqrt(0.2 / 5) = 0.2
    assert m["format_error_rate"] == {"mean": pytest.approx(0.2), "sem": pytest.approx(0.2), "n": 5}
    # valid [1, 0, 0, 1, 1]: mean 0.6, variance (3 * 0.16 + 2 * 0.36) / 4 = 0.3, SEM sqrt(0.06)
    assert m["valid_rate"] == {"mean": pytest.approx(0.6), "sem": pytest.approx(math.sqrt(0.06)), "n": 5}
    # improved on the best, over the two improve states [0, 1]: mean 0.5, variance 0.5, SEM sqrt(0.5 / 2) = 0.5
    assert m["improve_rate"] == {"mean": pytest.approx(0.5), "sem": pytest.approx(0.5), "n": 2}
    r = rewards[4]
    mean = (0.5 - 0.2 - 0.3 + 0.5 + r) / 5
    var = sum((x - mean) ** 2 for x in [0.5, -0.2, -0.3, 0.5, r]) / 4
    assert m["mean_reward"] == {"mean": pytest.approx(mean), "sem": pytest.approx(math.sqrt(var / 5)), "n": 5}
    assert result.by_stage["debug"]["format_error_rate"] == {"mean": 1.0, "sem": None, "n": 1}
    assert StepwiseResult.from_dict(json.loads(json.dumps(result.to_dict()))) == result
    assert result.sampling == SAMPLING.to_dict() and result.policy == "scripted"


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


def _result(policy, outcomes, rewards):
    records = tuple(StepwiseRecord(f"s{i}", "t", "improve" if i % 2 else "draft", o, r, None, None,
                                   (o == "valid") if i % 2 else None, None, 10)
                    for i, (o, r) in enumerate(zip(outcomes, rewards)))
    return StepwiseResult(policy, ("t",), SAMPLING.to_dict(), "compact", records)


def test_compare_stepwise_rows():
    before = _result("base", ["format_error", "format_error", "valid", "execution_error"], [0.0, 0.0, 0.5, 0.0])
    after = _result("tuned", ["valid", "valid", "valid", "format_error"], [0.5, 0.75, 0.5, 0.0])
    rows = compare_stepwise(before, after)
    assert len(COMPARE_COLUMNS) == 4
    # format: before [1,1,0,0] mean 0.5, SEM sqrt((4 * 0.25 / 3) / 4) = 0.288675; after [0,0,0,1] mean 0.25, SEM 0.25
    assert rows[0] == ("format errors %", "50.0 ± 28.9", "25.0 ± 25.0", "-25.0 ± 38.2")
    assert rows[1] == ("valid %", "25.0 ± 25.0", "75.0 ± 25.0", "+50.0 ± 35.4")
    # reward before [0, 0, 0.5, 0]: mean 0.125, SEM 0.125; after [0.5, 0.75, 0.5, 0]: mean 0.4375,
    # sample variance (0.00390625 + 0.09765625 + 0.00390625 + 0.19140625) / 3 = 0.098958, SEM 0.157288
    assert rows[2] == ("mean reward", "0.125 ± 0.125", "0.438 ± 0.157", "+0.312 ± 0.201")
    # improve states are s1 and s3: before [0, 0] (SEM 0), after [1, 0]
    assert rows[3] == ("improved on best % (improve states)", "0.0 ± 0.0", "50.0 ± 50.0", "+50.0 ± 50.0")
    # no record says its best is perfect: every improve state counts as one with room
    assert rows[4] == ("improved on best % (improve states below a perfect score)", "0.0 ± 0.0", "50.0 ± 50.0",
                       "+50.0 ± 50.0")
    assert rows[5:] == [("states", "4", "4", "–"), ("improve states below a perfect score", "2", "2", "–")]


def test_improvement_is_also_rated_where_the_best_is_not_perfect_already(titanic):
    from mleforge.eval.stepwise import perfect_score

    assert perfect_score(titanic) == 1.0  # accuracy
    records = (StepwiseRecord("a", "t", "improve", "valid", 0.5, 1.0, 1.0, False, None, 10, headroom=False),
               StepwiseRecord("b", "t", "improve", "valid", 0.9, 0.9, 0.8, True, None, 10, headroom=True),
               StepwiseRecord("c", "t", "improve", "format_error", -0.3, None, 0.7, False, None, 10, headroom=True),
               StepwiseRecord("d", "t", "draft", "valid", 0.5, 0.7, None, None, None, 10))
    m = StepwiseResult("p", ("t",), SAMPLING.to_dict(), "compact", records).metrics
    # all improve states [0, 1, 0]: mean 1/3; those with room [1, 0]: mean 0.5, SEM sqrt(0.5 / 2) = 0.5
    assert m["improve_rate"]["n"] == 3 and m["improve_rate"]["mean"] == pytest.approx(1 / 3, abs=1e-6)
    assert m["improve_rate_headroom"] == {"mean": 0.5, "sem": pytest.approx(0.5), "n": 2}
    again = StepwiseResult.from_dict(json.loads(json.dumps(
        StepwiseResult("p", ("t",), SAMPLING.to_dict(), "compact", records).to_dict())))
    assert [r.headroom for r in again.records] == [False, True, True, None]
    old = {k: v for k, v in records[0].to_dict().items() if k != "headroom"}  # written before the field
    assert StepwiseRecord.from_dict(old).headroom is None


def test_compare_stages_puts_each_change_apart():
    before = _result("base", ["format_error", "format_error", "valid", "execution_error"], [0.0, 0.0, 0.5, 0.0])
    warm = _result("sft", ["valid", "format_error", "valid", "execution_error"], [0.5, 0.0, 0.5, 0.0])
    after = _result("tuned", ["valid", "valid", "valid", "format_error"], [0.5, 0.75, 0.5, 0.0])
    assert compare_stages([("before", before), ("after", after)]) == (COMPARE_COLUMNS, compare_stepwise(before,
                                                                                                       after))
    columns, rows = compare_stages([("before", before), ("after SFT", warm), ("after", after)])
    assert columns == ("metric", "before", "after SFT", "after", "after SFT − before", "after − after SFT")
    # valid: before [0,0,1,0] 25 ± 25; sft [1,0,1,0] mean 50, SEM sqrt((4 * 0.25 / 3) / 4) = 28.9; after 75 ± 25
    assert rows[1] == ("valid %", "25.0 ± 25.0", "50.0 ± 28.9", "75.0 ± 25.0", "+25.0 ± 38.2", "+25.0 ± 38.2")
    # reward: sft [0.5, 0, 0.5, 0] mean 0.25, SEM sqrt(1/12)/2 = 0.144338; before 0.125 ± 0.125
    assert rows[2] == ("mean reward", "0.125 ± 0.125", "0.250 ± 0.144", "0.438 ± 0.157", "+0.125 ± 0.191",
                       "+0.188 ± 0.213")
    assert rows[-2] == ("states", "4", "4", "4", "–", "–")
    with pytest.raises(ValueError, match="two or more"):
        compare_stages([("before", before)])


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
        "eval", "--stepwise", "--states", "2", "--journals", str(expert_dir / "journals"), "--prompt-profile",
        "compact", "--policy", "template", "--tasks", "titanic", "--out", str(out), "--data-dir", str(data_root),
        "--json", "--trained-on", str(trained)])
    assert cmd_eval_stepwise(args) == 0
    record = json.loads((out / "run.json").read_text())
    assert record["kind"] == "stepwise" and record["tasks"] == ["titanic"] and len(record["states"]) == 2
    assert "CONTAMINATION" in record["contamination"]["warning"]
    saved = json.loads((out / "stepwise.json").read_text())
    assert saved["n_states"] == 2 and saved["prompt_profile"] == "compact"
    assert saved["metrics"]["valid_rate"]["mean"] == 1.0
    assert "CONTAMINATION" in StepwiseResult.from_dict(saved).contamination["warning"]
    report = write_report([out, out], tmp_path / "report", labels=["before", "after"])
    text = Path(report.markdown).read_text(encoding="utf-8")
    assert "Step-wise evaluation" in text and "valid %" in text and "change" in text and "CONTAMINATION" in text


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
