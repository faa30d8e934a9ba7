"""Repeated output lines are shown once with their count, in both prompt profiles."""

from __future__ import annotations

from mleforge.agent.execution import collapse_repeats, trim_head_tail
from mleforge.agent.journal import Journal
from mleforge.agent.node import Node
from mleforge.agent.prompt_config import PromptConfig
from mleforge.agent.prompts import render_prompt
from mleforge.agent.state import State
from tests.agent.test_prompts import SCRIPT, run, text_of

DAYOFWEEK = ("/workspace/script.py:68: Pandas4Warning: Series.dt.dayofweek is deprecated and will be removed "
             "in a future version. Use Series.dt.day_of_week instead.")
DAYOFYEAR = ("/workspace/script.py:68: Pandas4Warning: Series.dt.dayofyear is deprecated and will be removed "
             "in a future version. Use Series.dt.day_of_year instead.")
SOURCE = "  parts += [dates.dt.year, dates.dt.month, dates.dt.dayofweek, dates.dt.dayofyear]"
# What chicago-ridership's expert scripts print to stderr: two warnings, alternating, once per fit.
CHICAGO_STDERR = "\n".join([DAYOFWEEK, SOURCE, DAYOFYEAR, SOURCE] * 12) + "\n"


def test_a_line_repeated_in_a_row_is_shown_once_with_its_count():
    assert collapse_repeats("start\nretry\nretry\nretry\nend\n") == "start\nretry (repeated 3 times)\nend\n"
    # Only runs collapse: the same line again later starts a run of its own.
    assert collapse_repeats("a\na\nb\na\n") == "a (repeated 2 times)\nb\na\n"
    assert collapse_repeats("x\n\n\n\ny") == "x\n\ny"  # blank runs become one blank line, no count
    assert collapse_repeats("fold 1: 0.8\nfold 2: 0.9\n") == "fold 1: 0.8\nfold 2: 0.9\n"  # nothing repeats
    assert collapse_repeats("") == ""


def test_alternating_warnings_are_each_shown_once_with_their_count():
    out = collapse_repeats(CHICAGO_STDERR)
    assert out == "\n".join([
        DAYOFWEEK, SOURCE + " (these 2 lines repeated 12 times)",
        DAYOFYEAR, SOURCE + " (these 2 lines repeated 12 times)",
    ]) + "\n"
    assert len(CHICAGO_STDERR) == 5616 and len(out) == 536  # the main job's chicago stderr, measured


def test_a_traceback_after_the_warnings_keeps_every_line():
    trace = ('Traceback (most recent call last):\n  File "/workspace/script.py", line 9, in <module>\n'
             "    main()\nValueError: bad input\n")
    out = collapse_repeats(CHICAGO_STDERR + trace)
    assert out.endswith("\n" + trace) and out.count("Pandas4Warning") == 2


def test_prompts_collapse_before_trimming_so_the_tail_survives(prepared_registry):
    titanic = prepared_registry.get("titanic")
    stderr = CHICAGO_STDERR * 4 + "KeyError: 'Age'\n"
    journal = Journal("titanic", "higher").add(Node("a", "draft", "p", SCRIPT, execution=run(1, "", stderr, False),
                                                    error="the script exited with code 1"))
    state = State.debug(journal, "a")
    full = text_of(render_prompt(state, titanic, PromptConfig()))
    assert full.count(SOURCE + " (these 2 lines repeated 48 times)") == 2 and full.count("Pandas4Warning") == 2
    assert "KeyError: 'Age'" in full and "characters omitted" not in full
    compact = text_of(render_prompt(state, titanic, PromptConfig.compact()))  # 150 + 350 characters
    assert compact.endswith(SOURCE + " (these 2 lines repeated 48 times)\nKeyError: 'Age'\n```\n\n"
                            "Explain the bug in your plan, then fix it.")
    # Trimmed without collapsing, the compact budget (150 + 350 characters) is spent on warnings,
    # and the count of them is lost with the 21,980 characters cut.
    budget = PromptConfig.compact()
    trimmed = trim_head_tail(stderr, budget.output_head_chars, budget.output_tail_chars)
    assert "[... 21980 characters omitted ...]" in trimmed and trimmed.count("Pandas4Warning") == 2
    assert "repeated" not in trimmed
