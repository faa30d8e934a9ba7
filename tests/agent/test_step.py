"""One step end to end: malformed completions become format errors with their reward, never crashes."""

from __future__ import annotations

import pytest

from mleforge.agent.journal import Journal
from mleforge.agent.state import State
from mleforge.agent.step import RewardContext, run_step
from mleforge.reward import RewardConfig
from mleforge.sandbox import make_executor
from tests.agent.scripted import COPY_SAMPLE, CRASH

MALFORMED = {
    "empty": "",
    "prose only": "I would train a gradient boosting model and write the submission.",
    "two code blocks": "```python\nprint(1)\n```\nand\n```python\nprint(2)\n```",
    "unterminated fence": "Plan.\n```python\nimport pandas as pd\nprint('no end')\n",
    "non-UTF-8": b"Plan.\n```python\nprint('\xff\xfe')\n```",
    "1 MB of text": "x" * 1_000_000,
}


@pytest.fixture(scope="module")
def env(prepared_registry):
    task = prepared_registry.get("titanic")
    with make_executor("local") as executor:
        yield task, executor, RewardContext(task, RewardConfig(r_format=-0.1, r_fail=0.0, r_invalid=0.0))


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_malformed_completion_is_a_format_error(env, name):
    task, executor, rewards = env
    outcome = run_step(State.draft(task.id, direction="higher"), MALFORMED[name], task, executor, rewards)
    assert outcome.node.outcome == "format_error" and outcome.result is None
    assert outcome.node.error.startswith("format error (")
    assert outcome.reward.case == "format_error" and outcome.reward.total == -0.1


def test_edit_that_does_not_apply(env):
    task, executor, rewards = env
    crashed = run_step(State.draft(task.id, direction="higher"), CRASH, task, executor, rewards)
    journal = Journal(task.id, "higher").add(crashed.node)
    debug = State.debug(journal, crashed.node.id)
    edit = "<<<<<<< SEARCH\nthis line is not in the script\n=======\nprint('x')\n>>>>>>> REPLACE\n"
    outcome = run_step(debug, edit, task, executor, rewards)
    assert outcome.node.outcome == "format_error" and "search_not_found" in outcome.node.error
    fix = '<<<<<<< SEARCH\nraise ValueError("boom")\n=======\n' \
          'pd.read_csv("input/sample_submission.csv").to_csv("submission/submission.csv", index=False)\n' \
          '>>>>>>> REPLACE\n'
    fixed = run_step(debug, fix, task, executor, rewards)
    assert fixed.node.outcome == "valid" and fixed.node.metadata["format"] == "edits"
    assert fixed.reward.total == 0.5 and fixed.node.parent_id == crashed.node.id


def test_crash_after_writing_a_valid_submission_is_an_execution_error(env):
    task, executor, rewards = env
    text = COPY_SAMPLE.replace('print("wrote", len(sub), "rows")', 'raise SystemExit(3)')
    outcome = run_step(State.draft(task.id, direction="higher"), text, task, executor, rewards)
    assert outcome.report is not None and outcome.report.valid_submission
    assert outcome.node.outcome == "execution_error" and not outcome.node.valid
    assert outcome.node.error == "the script exited with code 3" and outcome.reward.total == 0.0


def test_fake_metric_without_submission(env):
    task, executor, rewards = env
    text = "Claim victory.\n```python\nprint('accuracy: 1.0')\n```"
    outcome = run_step(State.draft(task.id, direction="higher"), text, task, executor, rewards)
    assert outcome.node.outcome == "invalid_submission" and outcome.reward.total == 0.0
    assert "wrote no ./submission/submission.csv" in outcome.node.error
