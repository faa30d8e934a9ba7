"""The step-wise evaluation before training runs alongside the expert's collection (BeforeEvaluation),
and the warm start's own evaluation is a setting (stepwise.after_sft): on by default, on for a run
directory written before it existed, off where the run says so. The real evaluation and collection run
together in test_cli.py's --sft auto run; here the evaluation is a stand-in, to see the threads."""

from __future__ import annotations

import io
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from mleforge.train import recipe
from mleforge.train.config import TrainConfig
from mleforge.train.recipe import before_evaluation, load_run_config

EVAL_TASKS = (SimpleNamespace(id="penguins"),)


def plan(**changes):
    return SimpleNamespace(config=TrainConfig(**changes), eval_tasks=EVAL_TASKS)


class Recorder:
    """A stand-in for recipe.stepwise_evaluation: records the thread and arguments of each call;
    `gate` (if set) is waited on, as long as a real evaluation would run."""

    def __init__(self, gate=None, error=None):
        self.calls, self.gate, self.error = [], gate, error
        self.gate_opened = None

    def __call__(self, plan, folder, spec, label, registry, executor, progress=False, console=None):
        self.calls.append({"thread": threading.current_thread().name, "spec": spec, "label": label,
                           "progress": progress})
        if self.gate is not None:
            self.gate_opened = self.gate.wait(timeout=30)
        if self.error is not None:
            raise self.error
        return {"available": True, "label": label, "n_states": 2,
                "metrics": {"format_error_rate": {"mean": 0.5}, "valid_rate": {"mean": 0.5},
                            "mean_reward": {"mean": 0.1}}, "timing": {"gen_s": 3.0}}


def test_alongside_it_runs_in_its_own_thread_while_the_caller_goes_on(tmp_path, monkeypatch):
    gate = threading.Event()
    fake = Recorder(gate=gate)
    monkeypatch.setattr(recipe, "stepwise_evaluation", fake)
    before = before_evaluation(plan(), tmp_path, None, None, False, alongside=True)
    # the caller is not blocked: it is the one that lets the evaluation finish
    assert before.running and fake.gate_opened is None
    gate.set()
    result = before.wait()
    assert fake.gate_opened is True and not before.running
    assert result["label"] == "before" and len(fake.calls) == 1
    call = fake.calls[0]
    assert (call["thread"], call["spec"], call["label"], call["progress"]) == (
        "mleforge-before-eval", "bundled:qwen2.5-coder-0.5b", "before", False)  # no second live display
    assert before.wait() == result  # waiting again returns the same


@pytest.mark.parametrize("alongside, done, wanted", [(False, False, True), (True, True, True), (True, False, False)])
def test_otherwise_it_runs_at_once_in_the_callers_thread(tmp_path, monkeypatch, alongside, done, wanted):
    """Nothing to run beside it, an evaluation already made (a resumed run) or none wanted:
    stepwise_evaluation is called at once, in the foreground, with the caller's progress."""
    fake = Recorder()
    monkeypatch.setattr(recipe, "stepwise_evaluation", fake)
    if done:
        (tmp_path / "stepwise").mkdir()
        (tmp_path / "stepwise" / "before.json").write_text("{}")
    before = before_evaluation(plan(stepwise={"enabled": wanted}), tmp_path, None, None, True, alongside=alongside)
    assert not before.running and len(fake.calls) == 1
    assert (fake.calls[0]["thread"], fake.calls[0]["progress"]) == (threading.current_thread().name, True)
    assert before.wait()["label"] == "before"


def test_its_error_reaches_the_caller_when_it_waits(tmp_path, monkeypatch):
    monkeypatch.setattr(recipe, "stepwise_evaluation", Recorder(error=RuntimeError("the model did not load")))
    before = before_evaluation(plan(), tmp_path, None, None, False, alongside=True)
    with pytest.raises(RuntimeError, match="the model did not load"):
        before.wait()


def test_it_says_what_it_found_when_it_ran_in_the_background(tmp_path, monkeypatch):
    from rich.console import Console

    monkeypatch.setattr(recipe, "stepwise_evaluation", Recorder())
    captured = io.StringIO()
    console = Console(file=captured, width=300)  # the console the CLI passes in
    before = before_evaluation(plan(), tmp_path, None, None, True, alongside=True, console=console)
    before.wait()
    err = captured.getvalue()
    assert "step-wise evaluation (before) of bundled:qwen2.5-coder-0.5b on penguins: running alongside" in err
    assert ("step-wise evaluation (before): 2 states, format errors 50.0%, valid 50.0%, mean reward 0.100 "
            "(generation 3 s)") in err


def test_the_warm_starts_evaluation_is_on_unless_turned_off(tmp_path):
    from mleforge.cli.main import build_parser
    from mleforge.cli.train import overrides

    assert TrainConfig().stepwise.after_sft is True
    assert TrainConfig.preset_config("gpu-1x").stepwise.after_sft is True
    parser = build_parser()
    assert overrides(parser.parse_args(["train", "--eval-after-sft", "on"])) == {"stepwise": {"after_sft": True}}
    assert overrides(parser.parse_args(["train", "--eval-after-sft", "off"])) == {"stepwise": {"after_sft": False}}
    assert "stepwise" not in overrides(parser.parse_args(["train"]))
    with pytest.raises(Exception, match="expected true or false"):
        TrainConfig(stepwise={"after_sft": "yes"})
    # a run directory from before the setting existed evaluated its warm start: it resumes so
    saved = yaml.safe_load((Path(__file__).parent / "fixtures" / "legacy-cpu.yaml").read_text())
    del saved["stepwise_after_sft"]
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(saved))
    assert load_run_config(tmp_path).stepwise.after_sft is True
    # one written now keeps what it says
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(TrainConfig(stepwise={"after_sft": False}).to_dict()))
    assert load_run_config(tmp_path).stepwise.after_sft is False


SLEEPER = "import time\ntime.sleep(120)\n"


def test_a_stopped_executor_cancels_its_runs_and_refuses_new_ones(titanic):
    """StoppableExecutor on a real sandbox: a run going when stop() comes ends cancelled (and
    raises, so nothing records it), stop returns once it has, and later runs do not start."""
    from mleforge.sandbox import make_executor
    from mleforge.sandbox.stoppable import ExecutorStopped, StoppableExecutor

    with make_executor("local") as inner:
        results = []
        real_run = inner.run

        def spy(*args, **kwargs):
            results.append(real_run(*args, **kwargs))
            return results[-1]

        inner.run = spy
        executor = StoppableExecutor(inner)
        errors = []

        def go():
            try:
                executor.run(SLEEPER, titanic)
            except ExecutorStopped as exc:
                errors.append(exc)

        thread = threading.Thread(target=go)
        thread.start()
        while not executor._going:  # the run has started
            thread.join(0.05)
        assert executor.stop(timeout=60) is True
        thread.join(60)
        assert not thread.is_alive()
        assert [r.killed_by for r in results] == ["cancelled"]
        assert len(errors) == 1 and "cancelled" in str(errors[0])
        with pytest.raises(ExecutorStopped, match="not started"):
            executor.run(SLEEPER, titanic)
        assert len(results) == 1
        assert executor.isolation == inner.isolation  # the rest is the inner executor's


def test_a_failing_collection_stops_the_evaluation_before_the_executor_closes(tiny, titanic, registry, tmp_path,
                                                                              monkeypatch):
    """In `mleforge train`: the evaluation before runs beside the collection (its own thread, a
    run going); the collection fails; the run going is cancelled before the executor closes, and
    the collection's error is what the caller gets."""
    from mleforge.sandbox.stoppable import ExecutorStopped
    from mleforge.train.config import ModelConfig
    from mleforge.train.recipe import train

    events, seen = [], {}
    running = threading.Event()

    class Recording:
        """The run's executor, recording the order of its runs' ends and its close."""

        def __init__(self, inner):
            self.inner = inner

        def run(self, *args, **kwargs):
            running.set()  # the evaluation's run is going (StoppableExecutor counts it from here)
            result = self.inner.run(*args, **kwargs)
            events.append(("run", result.killed_by))
            return result

        def close(self):
            events.append(("close", None))
            self.inner.close()

        def __getattr__(self, name):
            return getattr(self.inner, name)

    real_executor = recipe._executor
    monkeypatch.setattr(recipe, "_executor", lambda config, folder: Recording(real_executor(config, folder)))

    def evaluation(plan, folder, spec, label, registry, executor, progress=False, console=None):
        seen["thread"] = threading.current_thread().name
        try:
            executor.run(SLEEPER, titanic)
        except ExecutorStopped as exc:
            seen["stopped"] = exc
            raise

    def collect(plan, folder, registry, executor, progress, console=None):
        assert running.wait(60)
        raise RuntimeError("the collection failed")

    monkeypatch.setattr(recipe, "stepwise_evaluation", evaluation)
    monkeypatch.setattr(recipe, "collect_expert", collect)
    config = TrainConfig(model=ModelConfig(spec=f"hf:{tiny}"), tasks="titanic", eval_tasks="penguins", steps=1,
                         group_size=2, sandbox={"executor": "local"}, stepwise={"engine": "transformers"})
    with pytest.raises(RuntimeError, match="the collection failed"):
        train(config, tmp_path / "run", registry=registry, progress=False)
    assert seen["thread"] == "mleforge-before-eval" and isinstance(seen["stopped"], ExecutorStopped)
    assert events[-2:] == [("run", "cancelled"), ("close", None)]  # cancelled first, then closed
    assert not (tmp_path / "run" / "stepwise" / "before.json").exists()
