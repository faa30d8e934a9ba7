"""The episode runner: search order, saved run directory, resume after an interruption."""

from __future__ import annotations

import json

import pytest

from mleforge.agent.journal import Journal
from mleforge.agent.runner import EpisodeConfig, EpisodeRunner
from mleforge.agent.search import SearchConfig
from mleforge.errors import ConfigError
from mleforge.sandbox import make_executor
from tests.agent.scripted import COPY_SAMPLE, CRASH, ScriptedPolicy


@pytest.fixture(scope="module")
def executor():
    with make_executor("local") as ex:
        yield ex


@pytest.fixture
def titanic(prepared_registry):
    return prepared_registry.get("titanic")


def test_search_saves_everything(titanic, executor, tmp_path):
    policy = ScriptedPolicy([CRASH, COPY_SAMPLE, "prose only", COPY_SAMPLE.replace("rows", "lines")])
    config = EpisodeConfig(steps=4, search=SearchConfig(num_drafts=2, debug_prob=1.0))
    result = EpisodeRunner(titanic, policy, executor, config, tmp_path / "run").run()

    stages = [s.stage for s in policy.states]
    # two drafts, then debug the crashed leaf (debug_prob=1), then improve the best
    assert stages == ["draft", "draft", "debug", "improve"]
    journal = Journal.load(tmp_path / "run" / "journal.json")
    assert [n.outcome for n in journal.nodes] == ["execution_error", "valid", "format_error", "valid"]
    assert result.steps == 4 and result.steps_to_first_valid == 2
    assert result.report is not None and result.report.valid_submission
    assert result.report.normalized_score == 0.0  # the sample submission is the baseline
    assert result.best_node_id == journal.nodes[1].id  # the earliest among equal scores
    lines = [json.loads(x) for x in (tmp_path / "run" / "steps.jsonl").read_text().splitlines()]
    assert [x["reward"]["total"] for x in lines] == [-0.2, 0.5, -0.3, 0.5]  # crash, valid, no code, valid
    assert [(x["tokens"], x["prompt_tokens"], x["latency_s"]) for x in lines] == [(10, 100, 0.0)] * 4
    assert lines[2]["wall_s"] is None and all(x["wall_s"] > 0 for x in lines[:2] + lines[3:])  # 3rd: no run
    for node in journal.nodes:
        assert (tmp_path / "run" / "nodes" / node.id / "script.py").read_text() == node.code
    assert (tmp_path / "run" / "nodes" / journal.nodes[1].id / "submission.csv").is_file()
    assert json.loads((tmp_path / "run" / "result.json").read_text())["steps"] == 4
    assert result.completion_tokens == 40 and result.prompt_tokens == 400


@pytest.mark.parametrize("isolation", ["auto", "none"])
def test_interrupted_run_resumes_without_redoing_steps(titanic, isolation, tmp_path):
    # A crash first: the debug state that follows holds its traceback, which must not name
    # the run's random workspace path (unisolated, it is shown as /workspace, as in bwrap),
    # or the resumed and the uninterrupted runs would differ in their node ids.
    config = EpisodeConfig(steps=4, seed=3, search=SearchConfig(num_drafts=1, debug_prob=1.0))
    texts = [CRASH, COPY_SAMPLE.replace("rows", "y"), COPY_SAMPLE.replace("rows", "r"),
             COPY_SAMPLE.replace("rows", "x")]
    with make_executor("local", isolation=isolation) as executor:
        _interrupt_and_resume(titanic, executor, config, texts, tmp_path)
    journal = Journal.load(tmp_path / "run" / "journal.json")
    assert [n.stage for n in journal.nodes] == ["draft", "debug", "improve", "improve"]
    assert 'File "/workspace/script.py"' in journal.nodes[0].execution.stderr


def _interrupt_and_resume(titanic, executor, config, texts, tmp_path):
    with pytest.raises(KeyboardInterrupt):
        EpisodeRunner(titanic, ScriptedPolicy(texts, fail_at=2), executor, config, tmp_path / "run").run()
    assert len(Journal.load(tmp_path / "run" / "journal.json")) == 2

    second = ScriptedPolicy(texts[2:])
    result = EpisodeRunner(titanic, second, executor, config, tmp_path / "run").run()
    assert second.calls == 2 and result.steps == 4
    assert len((tmp_path / "run" / "steps.jsonl").read_text().splitlines()) == 4

    uninterrupted = ScriptedPolicy(texts)
    EpisodeRunner(titanic, uninterrupted, executor, config, tmp_path / "again").run()
    ids = [n.id for n in Journal.load(tmp_path / "run" / "journal.json").nodes]
    assert ids == [n.id for n in Journal.load(tmp_path / "again" / "journal.json").nodes]


def test_time_limit_and_foreign_run_dir(titanic, executor, tmp_path):
    config = EpisodeConfig(steps=50, time_limit_s=0.001)
    result = EpisodeRunner(titanic, ScriptedPolicy([COPY_SAMPLE]), executor, config, tmp_path / "run").run()
    assert result.stopped_by == "time_limit" and result.steps <= 1
    with pytest.raises(ConfigError, match="holds a different run"):
        EpisodeRunner(titanic, ScriptedPolicy([COPY_SAMPLE]), executor,
                      EpisodeConfig(steps=2, seed=9), tmp_path / "run").run()


def test_config_validation():
    with pytest.raises(ConfigError, match="steps"):
        EpisodeConfig(steps=0)
    with pytest.raises(ConfigError, match="debug_prob"):
        SearchConfig(debug_prob=2)
