"""Short actions (expert/short.py): debug and improve answers as small edits within a budget,
as `mleforge collect` writes them for the compact profile, run for real in the sandbox."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mleforge.agent.actions import keep_base_bookkeeping, parse_completion, write_action
from mleforge.agent.elision import target_view
from mleforge.agent.journal import Journal
from mleforge.agent.node import Node
from mleforge.agent.prompt_config import PromptConfig
from mleforge.agent.prompts import render_prompt
from mleforge.agent.state import State
from mleforge.agent.step import RewardContext, run_step
from mleforge.errors import ConfigError
from mleforge.expert.collect import (
    COMPACT_COMPLETION_CHARS,
    CollectConfig,
    collect_samples,
    episode_states,
)
from mleforge.expert.description import describe
from mleforge.expert.policy import TemplatePolicy
from mleforge.expert.profile import task_profile
from mleforge.expert.script import render_script
from mleforge.expert.short import own_spec
from mleforge.expert.spec import make_spec, read_spec
from mleforge.policies.base import PolicyError
from mleforge.sandbox import make_executor
from tests.agent.test_prompts import run

BUDGET = COMPACT_COMPLETION_CHARS


@pytest.fixture(scope="module")
def executor():
    with make_executor("local") as ex:
        yield ex


@pytest.fixture(scope="module")
def collected(prepared_registry, executor, tmp_path_factory):
    """A compact collect of titanic: one draft, then three improves of the expert's own scripts."""
    config = CollectConfig(tasks="titanic", episodes=1, steps=4, drafts=1, ideas_high=0, embedder="tfidf",
                           prompt_profile="compact", workers=1)
    out = tmp_path_factory.mktemp("compact-collect")
    result = collect_samples(config, out, registry=prepared_registry, executor=executor)
    samples = [json.loads(line) for line in Path(result.samples_path).read_text(encoding="utf-8").splitlines()]
    [journal_path] = sorted(out.rglob("journal.json"))
    return result, samples, Journal.load(journal_path)


def test_compact_improve_samples_are_short_edits_that_run(collected, prepared_registry, executor):
    result, samples, journal = collected
    task = prepared_registry.get("titanic")
    assert result.counts["outcomes"] == {"valid": 4}
    improve = [s for s in samples if s["stage"] == "improve"]
    # A state where no small change fits falls back to a long answer, left out and counted.
    assert len(improve) >= 2 and set(result.counts["left_out"]) <= {"over_budget"}
    assert len(samples) + sum(result.counts["left_out"].values()) == 4
    states = {s.state_id: s for s in episode_states(journal)}
    nodes = {n.id: n for n in journal.nodes}
    for sample in improve:
        text = sample["completion"][0]["content"]
        assert sample["completion_chars"] == len(text) <= BUDGET
        plan = text.split("\n<<<<<<< SEARCH")[0].strip()
        assert plan.count(". ") + plan.count(": ") <= 3 and len(plan) < 200  # one or two sentences
        assert "template-spec" not in text and "# Idea:" not in text  # the expert's header is not edited
        state, node = states[sample["state_id"]], nodes[sample["node_id"]]
        assert "template-spec" not in sample["prompt"][1]["content"]  # ... nor shown
        # The model's view of the action: the completion applied to the state's real script.
        action = parse_completion(text, "improve", state.target.code)
        assert action.syntax_error is None and action.plan == node.plan
        assert action.code == keep_base_bookkeeping(state.target.code, node.code)
        assert action.code != node.code and read_spec(action.code) == read_spec(state.target.code)
        ran = run_step(state, text, task, executor, RewardContext(task))
        assert ran.node.valid and ran.node.score == node.score  # what the sample teaches is what ran


def test_the_expert_continues_its_episode_after_a_short_edit(collected, prepared_registry):
    _, samples, journal = collected
    profile = task_profile(prepared_registry.get("titanic"))
    specs = {n.id: own_spec(n.code, profile) for n in journal.nodes}
    assert all(s is not None for s in specs.values())  # every script's header still names its approach
    assert len({s.approach() for s in specs.values()}) == 4  # each improve a new approach
    nodes = {n.id: n for n in journal.nodes}
    for sample in (s for s in samples if s["stage"] == "improve"):
        node = nodes[sample["node_id"]]
        assert specs[node.id].seed == specs[node.parent_id].seed  # a short step keeps the seed
    # The journal's last script is a short step away from the one before it, read by its header.
    policy = TemplatePolicy(prepared_registry, completion_chars=BUDGET)
    state = State.improve(journal, journal.nodes[-1].id)
    texts = policy.texts(state, 4, seed=0)
    assert len(set(texts)) >= 3  # several distinct small changes for one state
    for text in texts:
        action = parse_completion(text, "improve", state.target.code)
        short = write_action("improve", action.plan, action.code, state.target.code, keep_bookkeeping=True)
        assert len(short) <= BUDGET and own_spec(action.code, profile) is not None


def test_a_model_edited_script_reads_as_foreign_not_as_its_stale_header(prepared_registry):
    profile = task_profile(prepared_registry.get("titanic"))
    spec = make_spec("linear", profile, params={"C": 1.0, "max_iter": 500})
    code = render_script(spec, profile, describe(spec, profile))
    assert own_spec(code, profile) == spec
    edited = code.replace("C=1.0", "C=3.0")
    assert read_spec(edited) == spec and own_spec(edited, profile) is None


def test_short_debug_restores_the_broken_line_and_runs(prepared_registry, executor):
    task = prepared_registry.get("titanic")
    profile = task_profile(task)
    spec = make_spec("linear", profile, params={"C": 1.0, "max_iter": 500})
    good = render_script(spec, profile, describe(spec, profile))
    broken = good.replace('pd.read_csv("input/train.csv")', 'pd.read_csv("input/train_data.csv")')
    draft = State.draft(task.id, journal=Journal(task.id, task.spec.direction), direction=task.spec.direction)
    crashed = run_step(draft, write_action("draft", "Draft.", broken), task, executor, RewardContext(task))
    assert not crashed.node.valid and "FileNotFoundError" in crashed.node.execution.stderr
    state = State.debug(Journal(task.id, task.spec.direction, (crashed.node,)), crashed.node.id)
    [text] = TemplatePolicy(prepared_registry, completion_chars=BUDGET).texts(state, 1, seed=0)
    action = parse_completion(text, "debug", broken)
    assert action.code == good and action.plan.startswith("It fails with `FileNotFoundError")
    short = write_action("debug", action.plan, action.code, broken, keep_bookkeeping=True)
    assert len(short) <= BUDGET and short.count("<<<<<<< SEARCH") == 1
    assert short.endswith('<<<<<<< SEARCH\n    train = pd.read_csv("input/train_data.csv")\n=======\n'
                          '    train = pd.read_csv("input/train.csv")\n>>>>>>> REPLACE\n')
    fixed = run_step(state, short, task, executor, RewardContext(task))
    assert fixed.node.valid, fixed.node.error


def test_compact_view_hides_the_header_and_its_searches_still_match(prepared_registry):
    profile = task_profile(prepared_registry.get("titanic"))
    spec = make_spec("linear", profile, params={"C": 1.0, "max_iter": 500})
    code = render_script(spec, profile, describe(spec, profile))
    journal = Journal("titanic", "higher").add(Node("a", "draft", "p", code, execution=run(), score=0.8, valid=True))
    state = State.improve(journal, "a")
    view = target_view(state, PromptConfig.compact())
    assert {0, 1} <= view.hidden and not view.text.startswith("# template-spec")
    assert view.text.split("\n")[0] == code.split("\n")[2]  # "# Task: ..." opens the view
    assert target_view(state, PromptConfig()).text == code  # the full profile shows it all
    assert "template-spec" in render_prompt(state, prepared_registry.get("titanic"))[1]["content"]


def test_a_budget_that_nothing_fits_falls_back_and_collect_counts_it(prepared_registry, executor, tmp_path):
    policy = TemplatePolicy(prepared_registry, completion_chars=50)
    assert policy.completion_chars == 50
    with pytest.raises(PolicyError, match="completion_chars"):
        TemplatePolicy(prepared_registry, completion_chars=-1)
    with pytest.raises(PolicyError, match=r"view_chars must be an integer >= 0 .*; got '2800'"):
        TemplatePolicy(prepared_registry, completion_chars=50, view_chars="2800")
    with pytest.raises(ConfigError, match="completion_chars"):
        CollectConfig(completion_chars=-5)
    assert CollectConfig().completion_budget == 0 and CollectConfig(prompt_profile="compact").completion_budget == BUDGET
    config = CollectConfig(tasks="penguins", episodes=1, steps=2, drafts=1, ideas_high=0, embedder="tfidf",
                           prompt_profile="compact", completion_chars=50, workers=1)
    result = collect_samples(config, tmp_path, registry=prepared_registry, executor=executor)
    assert result.counts["left_out"] == {"over_budget": 1} and result.counts["samples_by_stage"] == {"draft": 1}
    summary = json.loads((tmp_path / "collect.json").read_text())
    assert summary["completion_chars"] == 50
    with pytest.raises(ConfigError, match="completion budget 50 -> 720"):
        collect_samples(CollectConfig(**{**config.to_dict(), "completion_chars": None}), tmp_path,
                        registry=prepared_registry, executor=executor)
