"""Writing actions (the inverse of parsing): edit blocks from two scripts, and completions that
parse back to exactly the plan and script they were written from."""

from __future__ import annotations

import pytest

from mleforge.agent.actions import (
    EditBlock,
    edit_blocks,
    format_edits,
    parse_completion,
    write_action,
)

BASE = "import pandas as pd\n\nx = 1\nprint(x)\nx = 1\nprint(x)\n\nsave()\n"


def test_edit_blocks_of_a_one_line_change():
    new = BASE.replace("save()", "save(path)")
    assert edit_blocks(BASE, new) == [EditBlock(("save()",), ("save(path)",), (7,))]
    assert format_edits(edit_blocks(BASE, new)) == \
        "<<<<<<< SEARCH\nsave()\n=======\nsave(path)\n>>>>>>> REPLACE"


def test_a_search_grows_until_it_is_unique():
    # `x = 1` occurs twice, and so does `x = 1 / print(x)`: the block takes lines until it is unique.
    new = "import pandas as pd\n\nx = 1\nprint(x)\nx = 2\nprint(x)\n\nsave()\n"
    [block] = edit_blocks(BASE, new)
    assert block.search == ("x = 1", "print(x)", "")
    assert block.replace == ("x = 2", "print(x)", "")
    assert block.base_lines == (4, 5, 6)


def test_insertions_and_deletions_get_context():
    inserted = BASE.replace("import pandas as pd\n", "import pandas as pd\nimport numpy as np\n")
    [block] = edit_blocks(BASE, inserted)
    # An insertion has nothing to search for, and a blank line alone is no SEARCH: two lines of context.
    assert block == EditBlock(("", "x = 1"), ("import numpy as np", "", "x = 1"), (1, 2))
    assert parse_completion("Add numpy.\n" + format_edits([block]), "improve", BASE).code == inserted
    deleted = BASE.replace("\nsave()\n", "\n")
    assert parse_completion("Drop save.\n" + format_edits(edit_blocks(BASE, deleted)), "debug", BASE).code == deleted


@pytest.mark.parametrize("new", [
    BASE.replace("import pandas as pd", "import pandas as pd  # data") + "print('end')\n",
    "# header\n" + BASE,
    BASE.replace("x = 1\nprint(x)\nx = 1", "y = 0\nprint(x)\nx = 3"),
    "completely\ndifferent\n",
])
def test_write_action_round_trips_edits(new):
    text = write_action("improve", "Plan:\n- one change.", new, BASE)
    action = parse_completion(text, "improve", BASE)
    assert (action.plan, action.code, action.format) == ("Plan:\n- one change.", new, "edits")
    assert "```" not in text


def test_write_action_round_trips_a_draft_with_backticks():
    code = 'doc = """\n```\nnot the end\n```\n"""\nprint(doc)\n'
    text = write_action("draft", "A plan.", code)
    assert text.startswith("A plan.\n\n````python\n")
    action = parse_completion(text, "draft")
    assert (action.plan, action.code, action.format) == ("A plan.", code, "script")


def test_write_action_refuses_what_cannot_round_trip():
    with pytest.raises(ValueError, match="format edits"):
        write_action("debug", "Same.", BASE, BASE)  # edits that change nothing
    with pytest.raises(ValueError, match="format script"):
        write_action("draft", "```python\nprint(1)\n```", "print(2)\n")  # the plan holds a code block
