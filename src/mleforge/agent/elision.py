"""What a prompt shows of a script within a character budget: function bodies elided,
least relevant first, every line shown a real line of the script, so a SEARCH block copied
from it matches (`script_view`); the lines a traceback names are never elided."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from mleforge.agent.actions import bookkeeping_lines
from mleforge.agent.node import Node
from mleforge.agent.prompt_config import PromptConfig
from mleforge.agent.state import State

_TRACE_LINE_RE = re.compile(r'File "[^"]*script\.py", line (\d+)')
# Calls that build a model or its features: the bodies an edit most likely changes (shown longest).
_MODEL_RE = re.compile(
    r"\b\w*(?:Classifier|Regressor|Regression|Pipeline|Vectorizer|Encoder|Scaler|Imputer|Transformer|"
    r"NB|SVC|SVR|PCA|Ridge|Lasso)\(")
# Validation and fitting: changed less often than the model (elided before it, after the rest).
_FIT_RE = re.compile(r"\b\w*KFold\(|\btrain_test_split\(|\.fit\(")


def trace_lines(node: Node) -> frozenset[int]:
    """0-based lines of the script named by its traceback."""
    stderr = node.execution.stderr if node.execution is not None else ""
    return frozenset(int(m) - 1 for m in _TRACE_LINE_RE.findall(stderr))


@dataclass(frozen=True)
class ScriptView:
    """What a prompt shows of a script: `text`, and the 0-based lines of the script it leaves out."""

    text: str
    hidden: frozenset[int]


def script_view(code: str, budget: int, keep: frozenset[int] = frozenset(), *,
                hide_bookkeeping: bool = False) -> ScriptView:
    """`code` cut to about `budget` characters by eliding the bodies of top-level functions
    and classes (after their docstrings), each replaced by one `# [...]` line, until it fits:
    first bodies that build no model, features or validation, then those that validate or
    fit, then those that build the model or its features, the largest first; never a body holding a line of `keep` (the lines a traceback names).
    Module-level code is always shown; a script that does not parse is shown whole.
    budget 0: the whole script. `hide_bookkeeping`: the script's leading bookkeeping comments
    (`agent.actions.BOOKKEEPING_PREFIXES`) are left out, with no marker: the lines shown
    stay one unbroken run from the first shown line, so a SEARCH copied from them matches."""
    skip = bookkeeping_lines(code) if hide_bookkeeping else 0
    if skip:
        lines = code.split("\n")
        view = script_view("\n".join(lines[skip:]), budget, frozenset(k - skip for k in keep if k >= skip))
        return ScriptView(view.text, frozenset(range(skip)) | frozenset(i + skip for i in view.hidden))
    if budget <= 0 or len(code) <= budget:
        return ScriptView(code, frozenset())
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return ScriptView(code, frozenset())
    lines = code.split("\n")
    candidates = []  # (priority, -size, first line, last line, name)
    for node in tree.body:
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) or not node.body:
            continue
        body = node.body
        if isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant) \
                and isinstance(body[0].value.value, str):
            body = body[1:]  # the docstring stays: it says what the elided body does
        if not body:
            continue
        first, last = body[0].lineno - 1, (node.end_lineno or node.lineno) - 1
        if first <= node.lineno - 1 or last - first < 1:  # a one-line def, or too short to gain from
            continue
        if keep & set(range(first, last + 1)):
            continue
        chunk = "\n".join(lines[first:last + 1])
        tier = 2 if _MODEL_RE.search(chunk) else 1 if _FIT_RE.search(chunk) else 0
        candidates.append((tier, -len(chunk), first, last, node.name))
    hidden: set[int] = set()
    elided: dict[int, tuple[int, str]] = {}
    text = code
    for _, _, first, last, name in sorted(candidates):
        if len(text) <= budget:
            break
        elided[first] = (last, name)
        hidden.update(range(first, last + 1))
        text = _render_view(lines, elided)
    return ScriptView(text, frozenset(hidden))


def _render_view(lines: list[str], elided: dict[int, tuple[int, str]]) -> str:
    out: list[str] = []
    i = 0
    while i < len(lines):
        if i in elided:
            last, name = elided[i]
            indent = lines[i][: len(lines[i]) - len(lines[i].lstrip())]
            out.append(f"{indent}# [... {last - i + 1} lines of {name} not shown ...]")
            i = last + 1
            continue
        out.append(lines[i])
        i += 1
    return "\n".join(out)


def target_view(state: State, config: PromptConfig) -> ScriptView:
    """What the prompt of `state` shows of its target script (the whole of it in the full
    profile unless `code_chars` is set)."""
    node = state.target
    if node is None:
        raise ValueError(f"a {state.stage} state has no target script")
    keep = trace_lines(node) if state.stage == "debug" else frozenset()
    return script_view(node.code, config.code_chars, keep, hide_bookkeeping=config.hide_bookkeeping)
