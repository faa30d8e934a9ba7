"""Prompts rendered from states of a real built-in task, prepared under the temporary data root."""

from __future__ import annotations

from dataclasses import replace

import pytest

from mleforge.agent.execution import ExecutionSummary
from mleforge.agent.journal import Journal
from mleforge.agent.node import Node
from mleforge.agent.overview import data_overview
from mleforge.agent.prompt_config import PromptConfig
from mleforge.agent.prompts import render_prompt
from mleforge.agent.state import State
from mleforge.errors import ConfigError

SCRIPT = 'import pandas as pd\ntrain = pd.read_csv("./input/train.csv")\nprint(train["Age"].mean())\n'
# Lines that differ (a repeated line is collapsed before the output is trimmed).
LONG_STDERR = "HEAD-OF-ERR\n" + "".join(f"noise line {i}\n" for i in range(2000)) + "KeyError: 'Age'\n"


@pytest.fixture(scope="module")
def titanic(prepared_registry):
    return prepared_registry.get("titanic")


def run(returncode=0, stdout="validation accuracy: 0.79\n", stderr="", submission=True, wall_s=12.5):
    return ExecutionSummary(returncode, False, None, wall_s, stdout, stderr, submission)


def make_journal(ids=("a", "b", "c"), created=0.0, wall_s=12.5) -> Journal:
    a, b, c = ids
    j = Journal("titanic", "higher")
    j = j.add(Node(a, "draft", "Fit a logistic regression on sex and class.", SCRIPT.replace("Age", "age"),
                   execution=run(wall_s=wall_s), score=0.78244, valid=True, created_at=created))
    j = j.add(Node(b, "draft", "Gradient boosting with the age column.", SCRIPT, step=1,
                   execution=run(1, "loading\n", LONG_STDERR, False, wall_s=wall_s),
                   error=None, created_at=created + 1))
    j = j.add(Node(c, "improve", "Add the title from the name.", SCRIPT.replace("Age", "age") + "# titles\n",
                   parent_id=a, step=2, execution=run(wall_s=wall_s), score=0.80153, valid=True,
                   created_at=created + 2))
    return j


def text_of(messages) -> str:
    assert [m["role"] for m in messages] == ["system", "user"]
    assert all(isinstance(m["content"], str) and m["content"] for m in messages)
    return "\n".join(m["content"] for m in messages)


def test_draft_prompt(titanic):
    state = State.draft("titanic", ideas=("Extract the title (Mr, Mrs, Master) from the name.",))
    text = text_of(render_prompt(state, titanic))
    assert titanic.description().strip() in text
    for column in ("PassengerId", "passengerClass", "Survived", "sex", "age"):
        assert column in text  # the data overview names the real columns
    assert "train.csv: 1047 rows x 6 columns" in text and "test.csv: 262 rows x 5 columns" in text
    assert "./input/" in text and "./submission/submission.csv" in text and "./working/" in text
    assert "10 minutes" in text and "accuracy, higher is better" in text
    assert "numpy, pandas, scikit-learn, scipy" in text
    assert "# Ideas to consider\n\n- Extract the title (Mr, Mrs, Master) from the name." in text
    assert "<<<<<<< SEARCH" not in text  # no script to edit in a draft
    assert "Earlier attempts" not in text


def test_debug_prompt_shows_the_code_and_trimmed_output(titanic):
    config = PromptConfig(output_head_chars=100, output_tail_chars=200)
    text = text_of(render_prompt(State.debug(make_journal(), "b"), titanic, config))
    assert "# The script to fix (attempt 2)" in text
    assert f"```python\n{SCRIPT}```" in text
    assert "Result: exit code 1; submission written: no" in text
    assert "HEAD-OF-ERR" in text and "KeyError: 'Age'" in text  # head and tail survive
    omitted = len(LONG_STDERR) - 300
    assert f"[... {omitted} characters omitted ...]" in text
    assert text.count("noise line") < 30
    assert "<<<<<<< SEARCH" in text  # format B offered
    # the memory holds the other attempts, not the target itself
    assert "- Attempt 1 (draft): Fit a logistic regression on sex and class. -> public score 0.78244" in text
    assert "- Attempt 3 (improve of attempt 1): Add the title from the name. -> public score 0.80153" in text
    assert "Attempt 2 (draft)" not in text
    assert "<<<<<<< SEARCH" not in text_of(render_prompt(State.debug(make_journal(), "b"), titanic,
                                                         PromptConfig(allow_edits=False)))


def test_improve_prompt(titanic):
    text = text_of(render_prompt(State.improve(make_journal(), "c"), titanic))
    assert "# The script to improve (attempt 3, public score 0.80153)" in text
    assert "validation accuracy: 0.79" in text
    assert "- Attempt 2 (draft): Gradient boosting with the age column. -> failed: exit code 1: KeyError: 'Age'" in text
    hidden = text_of(render_prompt(State.improve(make_journal(), "c"), titanic, PromptConfig(show_scores=False)))
    assert "0.80153" not in hidden and "0.78244" not in hidden and "-> valid submission" in hidden


def test_a_run_without_feedback_shows_no_score_and_improves_the_last_valid_node(titanic):
    """Feedback "none": valid nodes keep no score, prompts show none, and the search's best
    node is the last valid one (it can see nothing else)."""
    scored = make_journal()
    bare = Journal("titanic", "higher", tuple(replace(n, score=None) for n in scored.nodes))
    assert scored.best_node().id == "c" and bare.best_node().id == "c" and bare.best_score is None
    earlier = Journal("titanic", "higher", (bare.nodes[2 - 2], bare.nodes[1]))
    assert earlier.best_node().id == "a"  # the last valid node, even with a later buggy one
    text = text_of(render_prompt(State.improve(bare, "c"), titanic))
    assert "score 0." not in text and "-> valid submission" in text
    assert "# The script to improve (attempt 3)" in text


def test_prompts_are_deterministic_and_follow_the_state_id(titanic):
    """States that hash the same render the same prompt: ids, clocks and wall times never show."""
    one = State.improve(make_journal(), "c")
    two = State.improve(make_journal(ids=("x", "y", "z"), created=1.7e9, wall_s=99.125), "z")
    assert one.state_id == two.state_id
    assert render_prompt(one, titanic) == render_prompt(one, titanic) == render_prompt(two, titanic)
    assert "99.125" not in text_of(render_prompt(two, titanic))
    changed = State.improve(make_journal(), "a")
    assert render_prompt(changed, titanic) != render_prompt(one, titanic)


def test_memory_is_bounded(titanic):
    j = make_journal()
    for i in range(6):
        j = j.add(Node(f"d{i}", "draft", f"plan {i} " + "word " * 200, "x\n", step=3 + i,
                       execution=run(1, "", "", False), error=f"error {i} " + "e" * 1000))
    text = text_of(render_prompt(State.draft("titanic", journal=j), titanic,
                                 PromptConfig(memory_nodes=3, memory_plan_chars=50, memory_error_chars=40)))
    assert "(6 older attempts not shown)" in text
    assert "Attempt 7 (draft)" in text and "Attempt 6 (draft)" not in text
    line = next(s for s in text.splitlines() if s.startswith("- Attempt 9"))
    assert len(line) < 150 and line.endswith("-> failed: exit code 1: error 5 " + "e" * 16 + "...")  # 40 characters
    assert "Take a different approach from the earlier attempts." in text


def test_code_with_backticks_cannot_break_its_fence(titanic):
    code = 'doc = """\n```\nnot the end\n```\n"""\nprint(doc)\n'
    j = Journal("titanic", "higher").add(
        Node("a", "draft", "p", code, execution=run(1, "", "boom", False)))
    text = text_of(render_prompt(State.debug(j, "a"), titanic))
    assert f"````python\n{code}````" in text


def test_stage_and_task_mismatch(titanic, prepared_registry):
    state = State.improve(make_journal(), "c")
    from mleforge.agent.prompts import debug_messages

    with pytest.raises(ValueError, match="debug state"):
        debug_messages(state, titanic)
    with pytest.raises(ValueError, match="task titanic"):
        render_prompt(state, prepared_registry.get("penguins"))


def test_data_overview_of_a_wide_table_is_bounded_and_cached(prepared_registry):
    mnist = prepared_registry.get("mnist-5k")
    overview = data_overview(mnist)
    assert overview is data_overview(mnist)  # computed once
    train = overview.split("\n\n")[1]
    assert "train.csv: 4000 rows x 786 columns" in train
    assert "  label " in train  # the target column is always described
    assert "... and 774 more columns (774 int64): pixel10, pixel11, pixel12, ..., pixel783" in train
    assert len(overview) < 5000


def test_data_overview_of_text(prepared_registry):
    overview = data_overview(prepared_registry.get("food-reviews"), PromptConfig(overview_value_chars=20))
    assert "review" in overview and "'First reaction wa...'" in overview


@pytest.mark.parametrize("field, value", [
    ("output_head_chars", -1), ("memory_nodes", 1.5), ("overview_sample_rows", 0), ("packages", ()),
    ("allow_edits", True),
])
def test_prompt_config_validation(field, value):
    if field == "allow_edits":
        assert replace(PromptConfig(), allow_edits=value).allow_edits
        return
    with pytest.raises(ConfigError, match=f"prompt.{field}"):
        PromptConfig(**{field: value})
