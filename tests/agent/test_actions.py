"""Parsing completions: well-formed ones give the script, every malformed one its exact reason."""

from __future__ import annotations

import random

import pytest

from mleforge.agent.actions import KINDS, Action, ActionFormatError, parse_completion

BASE = """import pandas as pd

train = pd.read_csv("./input/train.csv")
model = make_model(n_estimators=100)
model.fit(train)
print("val", 0.8)
"""


def refused(completion, stage="draft", base=None, **kw) -> ActionFormatError:
    with pytest.raises(ActionFormatError) as info:
        parse_completion(completion, stage, base, **kw)
    assert info.value.kind in KINDS
    return info.value


def edit(search: str, replace: str) -> str:
    """One edit block; an empty `replace` deletes the searched lines."""
    replacement = f"{replace}\n" if replace else ""
    return f"<<<<<<< SEARCH\n{search}\n=======\n{replacement}>>>>>>> REPLACE"


# --- format A ---


def test_plan_and_python_block():
    action = parse_completion("I will fit a forest.\n\n```python\nprint(1)\n```\n", "draft")
    assert action == Action(plan="I will fit a forest.", code="print(1)\n", format="script")
    assert action.syntax_error is None and action.n_edits == 0


def test_unlabelled_block_and_prose_after_it():
    action = parse_completion("Plan.\n```\nx = 1\n```\nThat is all.", "draft")
    assert action.code == "x = 1\n" and action.plan == "Plan.\nThat is all."


def test_labelled_block_wins_over_unlabelled_output():
    text = "Plan.\n```py\nprint(0.85)\n```\nIt prints:\n```\n0.85\n```"
    assert parse_completion(text, "draft").code == "print(0.85)\n"


def test_other_languages_are_not_the_script():
    text = "Install first:\n```bash\npip install lightgbm\n```\n```python\nimport lightgbm\n```"
    assert parse_completion(text, "draft").code == "import lightgbm\n"


def test_longer_fence_may_contain_backticks_and_crlf_is_normalized():
    text = 'Plan.\r\n````python\r\ndoc = """\r\n```\r\nnot a fence\r\n```\r\n"""\r\n````\r\n'
    action = parse_completion(text, "draft")
    assert action.code == 'doc = """\n```\nnot a fence\n```\n"""\n'


def test_empty_plan_is_allowed():
    assert parse_completion("```python\nprint(1)\n```", "draft").plan == ""


def test_syntax_errors_are_kept_as_actions():
    action = parse_completion("Plan.\n```python\nx = (1,\nprint(x)\n```", "draft")
    assert action.code == "x = (1,\nprint(x)\n"
    assert action.syntax_error.startswith("line 1:")
    assert parse_completion("```python\nreturn 1\n```", "draft").syntax_error == "line 1: 'return' outside function"
    assert parse_completion("```python\nx = '\x00'\n```", "draft").syntax_error is not None


def test_format_error_pickles():
    import pickle

    err = pickle.loads(pickle.dumps(refused("prose only")))
    assert (err.kind, err.reason) == ("no_code", refused("prose only").reason)


def test_action_round_trip():
    action = parse_completion("p\n```python\nx = (\n```", "draft")
    assert Action.from_dict(action.to_dict()) == action


@pytest.mark.parametrize("completion", ["", "   \n\t\n", None, b"", "\ufeff"])
def test_empty(completion):
    assert refused(completion).reason == "the completion is empty"


def test_prose_only():
    err = refused("I would train a gradient boosting model on all features.")
    assert err.kind == "no_code" and "no fenced code block" in err.reason


def test_only_a_non_python_block():
    err = refused("Run this:\n```bash\nls\n```")
    assert err.kind == "no_code" and "```bash" in err.reason


def test_two_python_blocks():
    err = refused("Part 1\n```python\na = 1\n```\nPart 2\n```python\nb = 2\n```")
    assert err.kind == "multiple_code_blocks"
    assert err.reason.startswith("the completion has 2 Python code blocks (lines 2-4, lines 6-8)")


def test_unterminated_fence():
    err = refused("Plan.\n```python\nimport pandas as pd\ntrain = pd.read_")
    assert err.kind == "unterminated_fence"
    assert err.reason.startswith("the code fence opened at line 2 (```python) is never closed")


def test_not_utf8():
    err = refused(b"Plan.\n```python\nprint('\xff')\n```")
    assert err.kind == "not_text" and err.reason == "the completion is not UTF-8 text: byte 0xff at offset 23"
    assert parse_completion("Plan.\n```python\nprint('é')\n```".encode(), "draft").code == "print('é')\n"


def test_lone_surrogate():
    err = refused("```python\nprint('\udcff')\n```")
    assert err.kind == "not_text" and "lone surrogate at offset 17" in err.reason


def test_length_limit():
    big = "x" * 200_001
    assert refused(big).reason == "the completion has 200001 characters; the limit is 200000"
    assert refused("```python\nprint(1)\n```", max_chars=10).kind == "too_long"
    assert refused(b"a" * 41, max_chars=10).reason == "the completion has 41 bytes; the limit is 10 characters"
    assert parse_completion("```python\n" + "#" * 150_000 + "\n```", "draft").code.startswith("###")


def test_empty_code_block():
    err = refused("Plan.\n```python\n\n   \n```")
    assert err.kind == "empty_code" and err.reason == "the code block at line 2 is empty"


def test_same_script_again_is_no_change():
    text = f"Run it again.\n```python\n{BASE}   \n```"
    assert refused(text, "improve", BASE).reason == "the script is identical to the current one; change something or fix the bug"
    assert parse_completion(f"```python\n{BASE}```", "draft").code == BASE  # a draft has nothing to compare with


def test_api_misuse_is_not_a_format_error():
    with pytest.raises(ValueError, match="stage"):
        parse_completion("x", "explore")
    with pytest.raises(ValueError, match="base_code"):
        parse_completion("x", "debug")
    with pytest.raises(TypeError):
        parse_completion(12, "draft")  # type: ignore[arg-type]


# --- format B ---


def test_edits_apply_in_order():
    text = "\n".join([
        "Use more trees, then print more digits.",
        edit("model = make_model(n_estimators=100)", "model = make_model(n_estimators=500)"),
        "And the print:",
        edit('print("val", 0.8)', 'print("val", 0.80)\nprint("done")'),
    ])
    action = parse_completion(text, "improve", BASE)
    assert action.format == "edits" and action.n_edits == 2
    assert action.code == BASE.replace("n_estimators=100", "n_estimators=500").replace(
        'print("val", 0.8)', 'print("val", 0.80)\nprint("done")'
    )
    assert action.plan == "Use more trees, then print more digits.\nAnd the print:"
    assert action.syntax_error is None


def test_later_edits_see_earlier_ones():
    double = edit("model.fit(train)", "model.fit(train)\nmodel.fit(train)")
    merge = edit("model.fit(train)\nmodel.fit(train)", "model.fit(train.dropna())")
    action = parse_completion(double + "\n" + merge, "improve", BASE)
    assert action.n_edits == 2 and action.code == BASE.replace("fit(train)", "fit(train.dropna())")
    # the second SEARCH exists only after the first edit
    err = refused(merge, "improve", BASE)
    assert err.kind == "search_not_found" and err.reason.startswith("edit 1 (line 1)")


def test_edits_inside_a_fence_and_deletions():
    text = f"Drop the print.\n```python\n{edit(chr(10).join(BASE.splitlines()[-1:]), '')}\n```"
    action = parse_completion(text, "debug", BASE)
    assert action.code == BASE.replace('print("val", 0.8)\n', "") and action.plan == "Drop the print."


def test_trailing_whitespace_tolerated():
    text = edit("model.fit(train)   \t", "model.fit(train.dropna())")
    assert "train.dropna()" in parse_completion(text, "debug", BASE).code
    base = BASE.replace("model.fit(train)", "model.fit(train)  ")  # trailing spaces in the script
    assert "train.dropna()" in parse_completion(edit("model.fit(train)", "model.fit(train.dropna())"), "debug", base).code
    # a REPLACE that cannot lose the SEARCH's extra indentation is not one block moved
    err = refused(edit("    model.fit(train)", "x"), "debug", BASE)
    assert err.kind == "search_not_found"


NESTED = """def make_model():
    estimator = Boost(
        learning_rate=0.1, max_iter=200,
    )
    return estimator
"""


def test_a_block_quoted_at_another_depth_is_moved_by_that_depth():
    # measured: a fine-tuned Qwen quoted the 8-space line with 4 spaces, 3 rollouts of 4
    shallow = edit("    learning_rate=0.1, max_iter=200,", "    learning_rate=0.05, max_iter=200,")
    assert parse_completion(shallow, "improve", NESTED).code == NESTED.replace("0.1,", "0.05,")
    # two lines, both off by the same prefix; the REPLACE keeps its own relative indentation
    text = edit("estimator = Boost(\n    learning_rate=0.1, max_iter=200,",
                "estimator = Boost(\n    learning_rate=0.1,\n    max_iter=300,")
    assert parse_completion(text, "improve", NESTED).code == NESTED.replace(
        "        learning_rate=0.1, max_iter=200,", "        learning_rate=0.1,\n        max_iter=300,")
    # quoted deeper than the script: the prefix comes off the REPLACE lines
    deep = edit("        return estimator", "        return estimator.fit")
    assert parse_completion(deep, "improve", NESTED).code == NESTED.replace("return estimator", "return estimator.fit")


def test_indentation_off_by_different_amounts_or_ambiguous_is_refused():
    # line 1 is 4 spaces shallow, line 2 is not: not one block moved, so not found
    text = edit("estimator = Boost(\n        learning_rate=0.1, max_iter=200,", "x = 1")
    assert refused(text, "improve", NESTED).kind == "search_not_found"
    base = "if a:\n    f(1)\nif b:\n        f(1)\n"
    err = refused(edit("  f(1)", "  f(2)"), "improve", base)  # matches both at another depth: never a guess
    assert err.kind == "search_ambiguous" and "(at lines 2 and 4)" in err.reason


def test_search_not_found_names_the_edit_and_first_line():
    text = edit("model = make_model(n_estimators=100)", "m = 1") + "\n" + edit("\nmodel.predict(test)\nfoo()", "x")
    err = refused(text, "improve", BASE)
    assert err.reason == (
        "edit 2 (line 6): its SEARCH text is not in the current script (first line searched: "
        "'model.predict(test)'); copy the lines exactly from the script"
    )


def test_search_must_be_unique():
    base = "a = 1\nprint(a)\nb = 2\nprint(a)\n"
    err = refused(edit("print(a)", "print(a, b)"), "improve", base)
    assert err.kind == "search_ambiguous"
    assert "matches more than once in the current script (at lines 2 and 4)" in err.reason
    # ambiguous only after trailing spaces are ignored: still ambiguous, never a guess
    assert refused(edit("print(a)  ", "x"), "improve", base.replace("print(a)\nb", "print(a) \nb")).kind == "search_ambiguous"
    assert parse_completion(edit("print(a)\nb = 2", "b = 3"), "improve", base).code == "a = 1\nb = 3\nprint(a)\n"


def test_edits_that_change_nothing():
    err = refused(edit("model.fit(train)", "model.fit(train)"), "improve", BASE)
    assert err.kind == "no_change" and err.reason == "the edits do not change the script"
    err = refused(edit(BASE.rstrip("\n"), ""), "improve", BASE)
    assert err.kind == "empty_code" and err.reason == "the edits leave the script empty"


def test_adversarial_edit_is_fast():
    base = "a\n" * 90_000
    text = edit("a\n" * 49_999 + "b", "c")
    with pytest.raises(ActionFormatError, match="not in the current script"):
        parse_completion(text, "improve", base)  # str.find keeps this linear, not 90k x 50k


def test_edits_in_a_draft():
    err = refused(edit("a", "b"), "draft")
    assert err.kind == "edits_in_draft" and "a draft has no script to edit" in err.reason


def test_edits_and_a_script_together():
    text = edit("model.fit(train)", "x") + "\n```python\nprint(1)\n```"
    assert refused(text, "improve", BASE).kind == "mixed_formats"


@pytest.mark.parametrize("text, kind, reason", [
    ("<<<<<<< SEARCH\nmodel.fit(train)\n>>>>>>> REPLACE", "malformed_edit",
     "edit 1 (line 1): line 3 has '>>>>>>> REPLACE' before the `=======` divider"),
    ("<<<<<<< SEARCH\nmodel.fit(train)\n=======\nx", "malformed_edit",
     "edit 1 (line 1): it never reaches `>>>>>>> REPLACE`; the completion may have been cut off"),
    ("<<<<<<< SEARCH\nmodel.fit(train)", "malformed_edit",
     "edit 1 (line 1): it never reaches `=======`; the completion may have been cut off"),
    ("Plan\n=======\n>>>>>>> REPLACE\n<<<<<<< SEARCH", "malformed_edit",
     "line 3: `>>>>>>> REPLACE` without a `<<<<<<< SEARCH` before it"),
    ("<<<<<<< SEARCH\n\n=======\nx\n>>>>>>> REPLACE", "empty_search",
     "edit 1 (line 1) has an empty SEARCH section; quote the exact lines of the script to replace"),
    ("<<<<<<< SEARCH\na\n=======\nb\n=======\nc\n>>>>>>> REPLACE", "malformed_edit",
     "edit 1 (line 1): line 5 has '=======' before `>>>>>>> REPLACE`"),
])
def test_malformed_edits(text, kind, reason):
    err = refused(text, "debug", BASE)
    assert (err.kind, err.reason) == (kind, reason)


# --- random inputs: parse returns an Action or raises ActionFormatError, nothing else ---

PIECES = [
    "```", "```python", "````", "```bash", "<<<<<<< SEARCH", "=======", ">>>>>>> REPLACE",
    "print(1)", "model.fit(train)", "import pandas as pd", "", " ", "\t", "Plan: use trees.",
    "x = (", "é✓", "\r", "\x00", "`", "<<<<<<<", "  ```python  ", "model = make_model(n_estimators=100)",
]


def random_completion(rng: random.Random) -> str | bytes:
    if rng.random() < 0.1:
        return bytes(rng.randrange(256) for _ in range(rng.randrange(60)))
    lines = [rng.choice(PIECES) for _ in range(rng.randrange(12))]
    if rng.random() < 0.3:
        lines.append("".join(rng.choice("`<=>\n #ab\t\x0bé") for _ in range(rng.randrange(30))))
    return "\n".join(lines)


def test_random_inputs_never_crash():
    rng = random.Random(20250523)
    outcomes = {"action": 0, "refused": 0}
    for _ in range(3000):
        completion = random_completion(rng)
        stage = rng.choice(["draft", "debug", "improve"])
        try:
            action = parse_completion(completion, stage, None if stage == "draft" else BASE, max_chars=400)
        except ActionFormatError as exc:
            assert exc.kind in KINDS and exc.reason
            outcomes["refused"] += 1
        else:
            assert isinstance(action, Action) and action.code.strip()
            outcomes["action"] += 1
    assert outcomes["action"] > 50 and outcomes["refused"] > 500  # both paths were exercised


def test_random_edits_apply_exactly():
    rng = random.Random(7)
    for _ in range(300):
        script = [f"v{rng.randrange(40)} = {rng.randrange(3)}" for _ in range(rng.randrange(1, 30))]
        start = rng.randrange(len(script))
        size = rng.randrange(1, len(script) - start + 1)
        block = script[start:start + size]
        replacement = [f"w = {rng.randrange(1000)}" for _ in range(rng.randrange(3))]
        occurrences = sum(script[i:i + size] == block for i in range(len(script) - size + 1))
        text = "Change it.\n" + edit("\n".join(block), "\n".join(replacement))
        base = "\n".join(script) + "\n"
        expected = "\n".join([*script[:start], *replacement, *script[start + size:], ""])
        try:
            action = parse_completion(text, "improve", base)
        except ActionFormatError as exc:
            if occurrences > 1:
                assert exc.kind == "search_ambiguous"
            elif not expected.strip():
                assert exc.kind == "empty_code"
            else:
                assert exc.kind == "no_change" and expected == base
        else:
            assert occurrences == 1 and action.code == expected
