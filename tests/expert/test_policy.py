"""The offline template expert: format, variety, seeding, stages, and valid submissions for real."""

from __future__ import annotations

import time
from dataclasses import replace

import pytest

from mleforge.agent.actions import parse_completion
from mleforge.agent.execution import ExecutionSummary
from mleforge.agent.journal import Journal
from mleforge.agent.node import Node
from mleforge.agent.state import State
from mleforge.agent.step import RewardContext, run_step
from mleforge.expert.catalog import catalog, catalog_ideas
from mleforge.expert.description import describe
from mleforge.expert.draft import match_idea
from mleforge.expert.policy import TemplatePolicy
from mleforge.expert.profile import task_profile
from mleforge.expert.script import render_script
from mleforge.expert.spec import ScriptSpec, make_spec, read_spec
from mleforge.policies import PolicyError, SamplingConfig, make_policy
from mleforge.tasks.registry import TaskRegistry

PROMPT = [{"role": "user", "content": "Solve the task."}]


@pytest.fixture(scope="module")
def policy(prepared_registry):
    return make_policy("template", registry=prepared_registry)


@pytest.fixture(scope="module")
def executor():
    from mleforge.sandbox import make_executor

    with make_executor("local") as ex:
        yield ex


def _draft(task, ideas=()):
    return State.draft(task.id, ideas, direction=task.spec.direction)


def _texts(policy, state, n=1, seed=0):
    [completions] = policy.generate([PROMPT], n=n, sampling=SamplingConfig(seed=seed), states=[state])
    return [c.text for c in completions]


# A family per task for the sandbox tests, covering many families and kept cheap: boosting
# only where it is small (its OpenMP threads crawl when other jobs load the machine).
LITE_FAMILIES = {
    "breast-cancer": "hist_gb", "chicago-ridership": "linear", "digits": "knn", "food-reviews": "multinomial_nb",
    "house-prices": "random_forest", "leaf-species": "linear", "penguins": "mlp", "titanic": "tree",
}
ALL_FAMILIES = {
    "breast-cancer": "extra_trees", "chicago-ridership": "tree", "credit-default": "random_forest",
    "diabetes": "hist_gb", "digits": "linear", "food-reviews": "linear", "hotel-rates": "linear",
    "house-prices": "linear", "leaf-species": "random_forest", "mnist-5k": "random_forest", "penguins": "knn",
    "poverty-attitudes": "tree", "telco-churn": "extra_trees", "titanic": "random_forest",
}


LITE = [t.id for t in TaskRegistry(mlebench=False).select("lite")]  # task specs only: no data is read


def _fast_idea(task, family: str) -> str:
    """The cheapest catalog approach of a family for the task, validated on a holdout."""
    profile = task_profile(task)
    holdout = [s for s in catalog(profile) if s.family == family and s.validation == "holdout"]
    cheapest = min(holdout, key=lambda s: (s.kwargs.get("n_estimators", 0) + s.kwargs.get("max_iter", 0),
                                           s.text_max_features))
    return describe(cheapest, profile)


def test_the_prefix_is_registered_and_imported_on_first_use(prepared_registry):
    policy = make_policy("template", registry=prepared_registry)
    assert isinstance(policy, TemplatePolicy) and policy.model == "template"
    with pytest.raises(PolicyError, match="unknown option"):
        make_policy("template", temperature=1.0)


def test_states_are_required(policy):
    with pytest.raises(PolicyError, match="states="):
        policy.generate([PROMPT], n=1)
    with pytest.raises(PolicyError, match="one state per prompt"):
        policy.generate([PROMPT, PROMPT], n=1, states=[_draft(policy.registry.get("titanic"))])


@pytest.mark.parametrize("task_id", LITE)
def test_every_completion_parses_into_a_plan_and_one_script(policy, task_id):
    task = policy.registry.get(task_id)
    [completions] = policy.generate([PROMPT], n=3, states=[_draft(task)])
    for completion in completions:
        action = parse_completion(completion.text, "draft")
        assert action.syntax_error is None
        assert action.plan.startswith("Idea: ") and "Plan:" in action.plan
        assert read_spec(action.code) is not None
        assert completion.model == "template" and completion.finish_reason == "stop"
        assert completion.completion_tokens == -(-len(completion.text) // 4)
        assert completion.prompt_tokens == -(-len(PROMPT[0]["content"]) // 4)


def test_samples_differ_and_a_rerun_repeats(policy):
    state = _draft(policy.registry.get("penguins"))
    first = _texts(policy, state, n=4, seed=7)
    assert len(set(first)) == 4
    assert _texts(policy, state, n=4, seed=7) == first
    assert _texts(policy, state, n=1, seed=7) == first[:1]  # sample j depends on j, not on n
    assert _texts(policy, state, n=4, seed=8) != first
    specs = [read_spec(t.split("```python\n")[1]) for t in first]
    assert len({s.approach() for s in specs}) == 4  # four approaches, not four seeds of one


def test_more_samples_than_ideas_still_differ(policy):
    task = policy.registry.get("titanic")
    idea = catalog_ideas(task_profile(task))[0]
    texts = _texts(policy, _draft(task, (idea,)), n=6)
    assert len(set(texts)) == 6
    assert texts[0].startswith(f"Idea: {idea}.")


def test_a_state_dict_is_accepted(policy):
    state = _draft(policy.registry.get("diabetes"))
    [[from_dict]] = policy.generate([PROMPT], states=[state.to_dict()])
    assert from_dict.text == _texts(policy, state)[0]


def test_a_free_text_idea_is_matched_by_family_and_validation(policy):
    task = policy.registry.get("credit-default")
    idea = "Train a random forest on the raw features and check it with 5-fold cross-validation"
    [text] = _texts(policy, _draft(task, (idea,)))
    spec = read_spec(parse_completion(text, "draft").code)
    assert (spec.family, spec.validation) == ("random_forest", "kfold")
    assert text.startswith(f"Idea (suggested): {idea}\nImplemented as: ")


def test_the_catalog_renders_valid_python_for_every_task(prepared_registry):
    for task in prepared_registry.tasks():
        profile = task_profile(task)
        specs = catalog(profile)
        assert 25 <= len(specs) <= 80, task.id
        ideas = [describe(s, profile) for s in specs]
        assert len(set(ideas)) == len(ideas), f"{task.id}: two approaches share an idea sentence"
        for spec, idea in zip(specs, ideas):
            code = render_script(spec, profile, idea)
            compile(code, f"<{task.id}>", "exec")
            assert read_spec(code) == spec and match_idea(idea, specs, profile)[0] == spec


def test_read_spec_tells_own_scripts_from_foreign_ones(prepared_registry):
    profile = task_profile(prepared_registry.get("titanic"))
    spec = make_spec("hist_gb", profile, params={"max_iter": 50}, drop=("text",), seed=3)
    assert ScriptSpec.from_dict(spec.to_dict()) == spec
    assert read_spec(render_script(spec, profile, "x")) == spec
    assert read_spec("import pandas as pd\n") is None
    assert read_spec('# template-spec: {"v": 1, "family": "nope"}\n') is None
    assert read_spec("# template-spec: {not json\n") is None


def test_usage_adds_up(prepared_registry):
    policy = TemplatePolicy(prepared_registry)
    [completions] = policy.generate([PROMPT], n=2, states=[_draft(prepared_registry.get("digits"))])
    usage = policy.usage()
    assert (usage.requests, usage.completions) == (1, 2)
    assert usage.completion_tokens == sum(c.completion_tokens for c in completions)
    policy.close()
    policy.close()


# --- debug and improve, from hand-made journals ------------------------------------------------


def _ran(stderr: str = "", returncode: int = 0) -> ExecutionSummary:
    return ExecutionSummary(returncode=returncode, timed_out=False, killed_by=None, wall_s=1.0,
                            stdout="", stderr=stderr, submission_written=returncode == 0)


def _journal_with(task, code: str, *, valid: bool, stderr: str = "", score: float | None = None) -> Journal:
    node = Node(id="n0", stage="draft", plan="p", code=code, execution=_ran(stderr, 0 if valid else 1),
                valid=valid, score=score, error=None if valid else "the script exited with code 1")
    return Journal(task.id, task.spec.direction, (node,))


def test_debug_of_its_own_script_takes_a_safer_variant_and_says_why(policy):
    task = policy.registry.get("titanic")
    profile = task_profile(task)
    spec = make_spec("hist_gb", profile, params={"max_iter": 100})
    stderr = "Traceback (most recent call last):\n  ...\nValueError: empty vocabulary; perhaps the documents only contain stop words"
    journal = _journal_with(task, render_script(spec, profile, "x"), valid=False, stderr=stderr)
    texts = _texts(policy, State.debug(journal, "n0"), n=3)
    assert len(set(texts)) == 3
    for text in texts:
        action = parse_completion(text, "debug", journal.get("n0").code)
        fixed = read_spec(action.code)
        assert fixed.approach() != spec.approach()
        assert "failed with `ValueError: empty vocabulary" in action.plan and "Fix: " in action.plan
    first = read_spec(parse_completion(texts[0], "debug", journal.get("n0").code).code)
    assert first.drop == ("text",)  # the error names the text features: leave them out first


def test_improve_proposes_another_approach_never_one_already_tried(policy):
    task = policy.registry.get("penguins")
    profile = task_profile(task)
    current = make_spec("linear", profile, params={"C": 0.1, "max_iter": 500})
    journal = _journal_with(task, render_script(current, profile, "x"), valid=True, score=0.9)
    texts = _texts(policy, State.improve(journal, "n0"), n=4)
    assert len(set(texts)) == 4
    for text in texts:
        action = parse_completion(text, "improve", journal.get("n0").code)
        proposed = read_spec(action.code)
        assert replace(proposed, validation=current.validation).approach() != current.approach()
        assert "scores 0.9 (macro_f1, higher is better)" in action.plan and "Improvement: " in action.plan


def test_improve_of_a_foreign_script_writes_a_catalog_approach(policy):
    task = policy.registry.get("diabetes")
    journal = _journal_with(task, "print('my own solution')\n", valid=True, score=50.0)
    [text] = _texts(policy, State.improve(journal, "n0"))
    action = parse_completion(text, "improve", "print('my own solution')\n")
    assert replace(read_spec(action.code), seed=0) in catalog(task_profile(task))
    assert "a script written by another policy" in action.plan


# --- for real: the sandbox and the grader ----------------------------------------------------


def _run_draft(policy, task, executor, idea):
    state = _draft(task, (idea,))
    [text] = _texts(policy, state)
    start = time.monotonic()
    outcome = run_step(state, text, task, executor, RewardContext(task))
    return outcome, time.monotonic() - start


@pytest.mark.parametrize("task_id", LITE)
def test_a_draft_is_a_valid_submission(policy, executor, task_id):
    task = policy.registry.get(task_id)
    outcome, _ = _run_draft(policy, task, executor, _fast_idea(task, LITE_FAMILIES.get(task_id, "linear")))
    assert outcome.node.valid, (outcome.node.error, outcome.result.stderr[-2000:])
    assert outcome.reward.total > 0
    assert "holdout " in outcome.node.execution.stdout


@pytest.mark.slow
def test_every_builtin_task_gets_a_valid_submission(policy, executor, prepared_registry):
    tasks = prepared_registry.tasks()
    assert len(tasks) >= 14
    failures = []
    for task in tasks:
        outcome, seconds = _run_draft(policy, task, executor, _fast_idea(task, ALL_FAMILIES.get(task.id, "linear")))
        if not outcome.node.valid:
            failures.append(f"{task.id}: {outcome.node.error}\n{outcome.result.stderr[-1500:]}")
        assert seconds < 300, f"{task.id} took {seconds:.0f} s"
    assert not failures, "\n\n".join(failures)


def test_debug_of_a_crashing_foreign_script_gives_a_valid_fix(policy, executor):
    task = policy.registry.get("titanic")
    crashing = "import pandas as pd\n\ntrain = pd.read_csv('input/train.csv')\nprint(train['Fare'].mean())\n"
    state = _draft(task)
    crashed = run_step(state, f"Use the fare.\n\n```python\n{crashing}```\n", task, executor, RewardContext(task))
    assert not crashed.node.valid and "KeyError" in crashed.node.execution.stderr
    journal = Journal(task.id, task.spec.direction, (crashed.node,))
    debug = State.debug(journal, crashed.node.id)
    [text] = _texts(policy, debug)
    assert text.startswith("The previous script failed with `KeyError: 'Fare'`; rewrite it from scratch")
    fixed = run_step(debug, text, task, executor, RewardContext(task))
    assert fixed.node.valid, (fixed.node.error, fixed.result.stderr[-2000:])


def test_debug_of_its_own_broken_script_runs_a_safer_variant(policy, executor):
    task = policy.registry.get("titanic")
    profile = task_profile(task)
    spec = make_spec("tree", profile, params={"max_depth": 4})
    broken = render_script(spec, profile, describe(spec, profile)).replace(
        "TfidfVectorizer(", "TfidfVectorizer(bogus=1, ")
    state = _draft(task)
    crashed = run_step(state, f"Draft.\n\n```python\n{broken}```\n", task, executor, RewardContext(task))
    assert not crashed.node.valid and "bogus" in crashed.node.execution.stderr
    debug = State.debug(Journal(task.id, task.spec.direction, (crashed.node,)), crashed.node.id)
    [text] = _texts(policy, debug)
    assert "Fix: leave out the free-text columns." in text
    fixed = run_step(debug, text, task, executor, RewardContext(task))
    assert fixed.node.valid, (fixed.node.error, fixed.result.stderr[-2000:])
    assert read_spec(fixed.node.code).drop == ("text",)


def test_a_task_with_no_inferable_target_gets_a_clear_error():
    from dataclasses import replace

    from mleforge.errors import ConfigError
    from mleforge.expert.profile import task_profile

    titanic = TaskRegistry(mlebench=False).get("titanic")
    no_target = replace(titanic, spec=replace(titanic.spec, target=None))
    with pytest.raises(ConfigError, match="template expert cannot solve task titanic.*predicts: Survived"):
        task_profile(no_target)
