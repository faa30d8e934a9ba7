"""The evaluation grid with a scripted policy: resume, failures, budgets, settings, contamination."""

from __future__ import annotations

import json

import pytest

from mleforge.errors import ConfigError
from mleforge.eval.config import EvalConfig
from mleforge.eval.runner import EvalGrid, run_dir_for, run_eval
from mleforge.sandbox import make_executor
from tests.agent.scripted import COPY_SAMPLE, ScriptedPolicy

TASKS = "titanic,penguins"


@pytest.fixture(scope="module")
def executor():
    with make_executor("local") as ex:
        yield ex


class FailsOn(ScriptedPolicy):
    """Copies the sample submission, except on one task, where it raises."""

    def __init__(self, task_id: str):
        super().__init__([COPY_SAMPLE])
        self.task_id = task_id

    def generate(self, prompts, n=1, sampling=None, *, states=None):
        if states and states[0].task_id == self.task_id:
            raise RuntimeError(f"no answer for {self.task_id}")
        return super().generate(prompts, n, sampling, states=states)


class Recorder:
    def __init__(self):
        self.events = []
        self.grid = None

    def start(self, grid, finished, steps):
        self.events.append(("start", len(grid), len(finished), steps))

    def step(self, task_id, seed, outcome):
        self.events.append(("step", task_id, seed))

    def done(self, task_id, seed, record):
        self.events.append(("done", task_id, seed, type(record).__name__))


def _mtimes(eval_dir, pairs):
    return {p: run_dir_for(eval_dir, *p).joinpath("result.json").stat().st_mtime_ns for p in pairs}


def test_interrupted_evaluation_resumes_without_redoing_runs(prepared_registry, executor, tmp_path):
    config = EvalConfig(policy="scripted", tasks=TASKS, seeds=2, steps=1, workers=1)
    # Seed-major order: titanic/0, penguins/0, titanic/1; the third generate call is interrupted.
    with pytest.raises(KeyboardInterrupt):
        run_eval(config, tmp_path, registry=prepared_registry, executor=executor,
                 policy=ScriptedPolicy([COPY_SAMPLE], fail_at=2))
    partial = json.loads((tmp_path / "aggregate.json").read_text())
    assert partial["interrupted"] and partial["runs"]["finished"] == 2
    assert {(m["task_id"], m["seed"]) for m in partial["runs"]["missing"]} == {("titanic", 1), ("penguins", 1)}
    done = [("titanic", 0), ("penguins", 0)]
    before = _mtimes(tmp_path, done)

    again = ScriptedPolicy([COPY_SAMPLE])
    listener = Recorder()
    result = run_eval(config, tmp_path, registry=prepared_registry, executor=executor, policy=again,
                      listener=listener)
    assert again.calls == 2 and (result.ran, result.skipped, result.failed) == (2, 2, 0)
    assert _mtimes(tmp_path, done) == before  # finished runs were loaded, not redone
    agg = json.loads((tmp_path / "aggregate.json").read_text())
    assert agg == result.aggregate and not agg["interrupted"]
    assert agg["runs"]["finished"] == 4 and agg["metrics"]["valid_submission"]["mean"] == 1.0
    assert listener.events[0] == ("start", 4, 2, 1)
    assert sorted(e for e in listener.events if e[0] == "done") == [
        ("done", "penguins", 1, "RunReport"), ("done", "titanic", 1, "RunReport")]
    report = json.loads(run_dir_for(tmp_path, "penguins", 1).joinpath("report.json").read_text())
    assert report["competition_id"] == "penguins" and report["seed"] == 1 and report["steps"] == 1
    assert report["valid_submission"] and report["normalized_score"] == 0.0  # the sample submission
    # How the scripts were isolated: in the aggregate and in each run's config.
    isolation = executor.resolve_isolation()
    assert agg["isolation"] == {**isolation.to_dict(), "summary": isolation.describe()}
    run_config = json.loads(run_dir_for(tmp_path, "penguins", 1).joinpath("config.json").read_text())
    assert run_config["isolation"]["kind"] == isolation.kind == "bwrap"
    assert run_config["isolation"]["bwrap"] == isolation.bwrap

    # Other settings in the same folder are refused, not mixed in.
    with pytest.raises(ConfigError, match="other settings"):
        run_eval(EvalConfig(policy="scripted", tasks=TASKS, seeds=2, steps=2), tmp_path,
                 registry=prepared_registry, executor=executor, policy=ScriptedPolicy([COPY_SAMPLE]))


def test_a_failing_run_is_recorded_and_the_grid_goes_on(prepared_registry, executor, tmp_path):
    ckpt = tmp_path / "train" / "checkpoint-1"
    ckpt.mkdir(parents=True)
    (ckpt / "mleforge_run.json").write_text(json.dumps({"kind": "train", "tasks": ["titanic", "digits"]}))
    config = EvalConfig(policy=f"hf:{ckpt}", tasks=TASKS, seeds=1, steps=1)
    out = tmp_path / "eval"
    result = run_eval(config, out, registry=prepared_registry, executor=executor, policy=FailsOn("penguins"))
    agg = result.aggregate
    assert result.failed == 1 and agg["runs"]["finished"] == 1 and agg["runs"]["failed"] == 1
    assert agg["runs"]["missing"] == [{"task_id": "penguins", "seed": 0, "reason": "failed",
                                       "error": "RuntimeError: no answer for penguins"}]
    error = json.loads(run_dir_for(out, "penguins", 0).joinpath("error.json").read_text())
    assert "RuntimeError" in error["traceback"]
    # The contamination guard found the record in the checkpoint and says so in the aggregate.
    assert agg["contamination"]["overlap"] == ["titanic"]
    assert "CONTAMINATION" in agg["contamination"]["warning"]
    record = json.loads((out / "run.json").read_text())
    assert record["kind"] == "eval" and record["tasks"] == ["titanic", "penguins"]
    assert set(json.loads((out / "leaderboards.json").read_text())) == {"titanic", "penguins"}

    # On resume the failed run is tried again (it never finished); the finished one is not.
    retry = ScriptedPolicy([COPY_SAMPLE])
    result = run_eval(config, out, registry=prepared_registry, executor=executor, policy=retry)
    assert retry.calls == 1 and result.failed == 0 and result.aggregate["runs"]["finished"] == 2
    assert not run_dir_for(out, "penguins", 0).joinpath("error.json").exists()


def test_stop_ends_the_grid_and_the_rest_resumes(prepared_registry, executor, tmp_path):
    config = EvalConfig(policy="scripted", tasks=TASKS, seeds=1, steps=2, workers=1)
    listener = Recorder()
    grid = EvalGrid(config, tmp_path, registry=prepared_registry, executor=executor,
                    policy=ScriptedPolicy([COPY_SAMPLE]), listener=listener)
    listener.step = lambda *a: grid.stop()  # a budget that runs out at the first step
    result = grid.run()
    assert result.aggregate["interrupted"] and result.aggregate["runs"]["finished"] == 0
    assert len((run_dir_for(tmp_path, "titanic", 0) / "steps.jsonl").read_text().splitlines()) == 1
    # The stopped run saved its step: resuming asks the policy only for the steps not yet taken.
    again = ScriptedPolicy([COPY_SAMPLE])
    result = run_eval(config, tmp_path, registry=prepared_registry, executor=executor, policy=again)
    assert again.calls == 1 + 2 and result.aggregate["runs"]["finished"] == 2


def test_stop_lets_a_run_at_its_last_step_finish(prepared_registry, executor, tmp_path):
    config = EvalConfig(policy="scripted", tasks=TASKS, seeds=1, steps=1, workers=1)
    listener = Recorder()
    grid = EvalGrid(config, tmp_path, registry=prepared_registry, executor=executor,
                    policy=ScriptedPolicy([COPY_SAMPLE]), listener=listener)
    listener.step = lambda *a: grid.stop()
    result = grid.run()
    # Its only step was its last: the run is graded and kept; the next one never started.
    assert result.aggregate["runs"]["finished"] == 1
    assert result.aggregate["runs"]["missing"] == [
        {"task_id": "penguins", "seed": 0, "reason": "not run", "error": None}]


def test_config_validation():
    with pytest.raises(ConfigError, match="seeds"):
        EvalConfig(seeds=0)
    with pytest.raises(ConfigError, match="steps"):
        EvalConfig(steps=0)
    with pytest.raises(ConfigError, match="JSON"):
        EvalConfig(policy_options={"registry": object()})
    config = EvalConfig(seeds=2, first_seed=5, policy_options={"num_threads": 1}, train_runs=["a"])
    assert config.seed_list == [5, 6] and EvalConfig.from_dict(json.loads(json.dumps(config.to_dict()))) == config
    with pytest.raises(ConfigError, match="unknown"):
        EvalConfig.from_dict({"polcy": "template"})
