"""Kaggle's protocol in an evaluation: nothing a run sees or writes holds its private score
before the final grade (the issue's Show item), and feedback "none" shows no score at all.

The task's own grade function plants distinctive scores: 0.61803 on the private rows (ids
7, 8 of the tiny task; tests/grading/test_split.py), 0.52413 on the public rows (5, 6).
"""

from __future__ import annotations

import json

import pytest

from mleforge.eval.config import EvalConfig
from mleforge.eval.runner import run_dir_for, run_eval
from mleforge.sandbox import make_executor
from mleforge.tasks.registry import TaskRegistry
from tests.agent.scripted import COPY_SAMPLE, ScriptedPolicy
from tests.tasks.helpers import write_task

PRIVATE, PUBLIC, FULL = "0.61803", "0.52413", "0.70001"
GRADE_PY = f"""
def grade(submission, answers):
    ids = sorted(answers["id"].tolist())
    if ids == [7, 8]:
        return {PRIVATE}
    if ids == [5, 6]:
        return {PUBLIC}
    return {FULL}
"""
# The run's final grade, and only it, may hold the private score.
FINAL_FILES = {"result.json", "report.json", "aggregate.json"}


class PromptRecorder(ScriptedPolicy):
    def __init__(self):
        # Two drafts, then an improvement that changes the script (an identical one is refused).
        super().__init__([COPY_SAMPLE, COPY_SAMPLE, COPY_SAMPLE.replace('print("wrote"', 'print("again, wrote"')])
        self.prompts: list[str] = []

    def generate(self, prompts, n=1, sampling=None, *, states=None):
        self.prompts += ["\n".join(m["content"] for m in messages) for messages in prompts]
        return super().generate(prompts, n, sampling, states=states)


@pytest.fixture
def planted(tmp_path):
    write_task(tmp_path / "tasks", metric_lines="grade_fn: grade:grade\ndirection: higher", grade_py=GRADE_PY)
    return TaskRegistry(task_dirs=[tmp_path / "tasks"], include_builtin=False, data_dir=tmp_path / "data",
                        mlebench=False)


def _evaluate(registry, out, feedback):
    policy = PromptRecorder()
    config = EvalConfig(policy="scripted", tasks="tiny", seeds=1, steps=3, workers=1, feedback=feedback)
    with make_executor("local") as executor:
        run_eval(config, out, registry=registry, policy=policy, executor=executor)
    return policy.prompts


def _files(root):
    return {p: p.read_text(encoding="utf-8", errors="replace") for p in sorted(root.rglob("*")) if p.is_file()}


def test_no_private_score_before_the_final_grade(planted, tmp_path):
    out = tmp_path / "eval"
    prompts = _evaluate(planted, out, "public")
    assert len(prompts) == 3
    # The improve prompt (third step) shows the public score of the attempts, never the private one.
    assert f"public score {PUBLIC}" in prompts[2]
    assert not [i for i, text in enumerate(prompts) if PRIVATE in text or FULL in text]
    files = _files(out)
    leaking = [str(p.relative_to(out)) for p, text in files.items()
               if (PRIVATE in text or FULL in text) and p.name not in FINAL_FILES]
    assert leaking == []
    journal = json.loads(run_dir_for(out, "tiny", 0).joinpath("journal.json").read_text())
    assert [n["score"] for n in journal["nodes"]] == [float(PUBLIC)] * 3
    # The final grade is the private one, with the public score and the protocol beside it.
    report = json.loads(run_dir_for(out, "tiny", 0).joinpath("report.json").read_text())
    assert (report["score"], report["public_score"], report["part"], report["feedback"]) == (
        float(PRIVATE), float(PUBLIC), "private", "public")
    aggregate = json.loads((out / "aggregate.json").read_text())
    assert aggregate["protocol"]["feedback"] == "public" and aggregate["config"]["feedback"] == "public"
    assert json.loads((out / "run.json").read_text())["protocol"]["feedback"] == "public"


def test_feedback_none_shows_no_score_at_all(planted, tmp_path):
    out = tmp_path / "eval"
    prompts = _evaluate(planted, out, "none")
    assert len(prompts) == 3 and "-> valid submission" in prompts[2]
    assert not [i for i, text in enumerate(prompts) if PRIVATE in text or PUBLIC in text or FULL in text]
    run = run_dir_for(out, "tiny", 0)
    journal = json.loads(run.joinpath("journal.json").read_text())
    assert [n["score"] for n in journal["nodes"]] == [None] * 3 and all(n["valid"] for n in journal["nodes"])
    assert PRIVATE not in run.joinpath("journal.json").read_text()
    report = json.loads(run.joinpath("report.json").read_text())
    # The answer is the last valid node (nothing else to choose by), graded on the private rows.
    result = json.loads(run.joinpath("result.json").read_text())
    assert result["best_node_id"] == journal["nodes"][-1]["id"] and result["feedback"] == "none"
    assert (report["score"], report["feedback"]) == (float(PRIVATE), "none")


def test_feedback_is_public_or_none_everywhere(planted):
    from mleforge.agent.runner import EpisodeConfig
    from mleforge.agent.step import RewardContext
    from mleforge.errors import ConfigError

    task = planted.get("tiny")
    for make in (lambda: EvalConfig(feedback="private"), lambda: EpisodeConfig(feedback="test"),
                 lambda: RewardContext(task, feedback="full")):
        with pytest.raises(ConfigError, match="feedback must be one of public, none"):
            make()
    assert EvalConfig(feedback="none").episode(0).feedback == "none"


def test_a_run_folder_of_another_feedback_is_not_resumed(planted, tmp_path):
    from mleforge.agent.runner import EpisodeConfig, EpisodeRunner
    from mleforge.errors import ConfigError
    from mleforge.tasks.preparation import prepare

    task = planted.get("tiny")
    prepare(task)
    with make_executor("local") as executor:
        EpisodeRunner(task, PromptRecorder(), executor, EpisodeConfig(steps=1), tmp_path / "run").run()
        with pytest.raises(ConfigError, match="feedback public"):
            EpisodeRunner(task, PromptRecorder(), executor, EpisodeConfig(steps=1, feedback="none"),
                          tmp_path / "run").run()
