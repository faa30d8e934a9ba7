"""Parsing a completion into an Action: a plan and the full script to run.

Two formats are accepted:

A (any stage): a short plan in prose and exactly one fenced Python code block
   (```python ... ``` or an unlabelled ``` ... ```) holding the complete script.
B (debug, improve): a plan and one or more search/replace edits of the target
   script, bare or inside a fence:

       <<<<<<< SEARCH
       exact lines from the current script
       =======
       replacement lines
       >>>>>>> REPLACE

   Edits apply in order, each to the script as the previous ones left it. A
   SEARCH must match exactly once: first as whole lines, exactly; failing
   that, with trailing whitespace ignored on every line; failing that, with
   the whole block indented by a different amount (every non-blank line of the
   SEARCH off the script's by the same leading prefix: the REPLACE lines are
   then re-indented by that prefix, as a model that quoted a nested block at
   the wrong depth meant). More than one match at any step is an error (never
   a guess), and so is an indentation that differs line by line.

Anything else raises `ActionFormatError` with a `kind` (for counting) and a
`reason` (for the log and for the reward's breakdown); no other exception
comes out of `parse_completion` for any text or bytes.

Policy on syntax: a script that is not valid Python is still an Action (with
`syntax_error` set). Running it yields the SyntaxError traceback, which is
exactly what a debug step learns from; it is an execution error, not a format
error. An empty script, though, is a format error: there is nothing to run.

Corner case (ML-Agent: "actions that edit nothing"): in debug and improve,
edits that leave the script unchanged, or a full script identical to the
current one (up to trailing whitespace), are format errors. Rerunning the same
script would otherwise earn an improve state a free 0.5.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mleforge.errors import MleforgeError
from mleforge.reward.components import STAGES

DEFAULT_MAX_CHARS = 200_000
ACTION_FORMATS = ("script", "edits")
# Info strings of a fence taken as Python. Unlabelled fences count only when no
# fence is labelled Python: "```\n0.85\n```" quoting an output is then not code.
PYTHON_LABELS = ("python", "py", "python3")

# Why a completion was refused, one code each (ActionFormatError.kind).
KINDS = (
    "empty", "not_text", "too_long", "unterminated_fence", "no_code", "multiple_code_blocks",
    "empty_code", "mixed_formats", "edits_in_draft", "malformed_edit", "empty_search",
    "search_not_found", "search_ambiguous", "no_change",
)

# A fence opener: 3+ backticks, then an info string without backticks (CommonMark).
_OPEN_RE = re.compile(r"^[ \t]*(`{3,})[ \t]*([^`\s]*)[^`]*$")
_CLOSE_RE = re.compile(r"^[ \t]*(`{3,})[ \t]*$")
_SEARCH_RE = re.compile(r"^[ \t]*<{5,9}[ \t]*SEARCH[ \t]*$")
_DIVIDER_RE = re.compile(r"^[ \t]*={5,9}[ \t]*$")
_REPLACE_RE = re.compile(r"^[ \t]*>{5,9}[ \t]*REPLACE[ \t]*$")


class ActionFormatError(MleforgeError):
    """A completion holds no usable action; `reason` says exactly why, `kind` names the case."""

    def __init__(self, kind: str, reason: str):
        self.kind = kind
        self.reason = reason
        super().__init__(reason)

    def __reduce__(self):  # survives pickling (worker processes, Ray) with both fields
        return (type(self), (self.kind, self.reason))


@dataclass(frozen=True)
class Action:
    """What a completion asks to run: `code` is always the full new script."""

    plan: str
    code: str
    format: str  # "script" (format A) or "edits" (format B)
    n_edits: int = 0
    syntax_error: str | None = None  # "line N: message" when the script does not compile

    def to_dict(self) -> dict[str, Any]:
        return {
            "plan": self.plan,
            "code": self.code,
            "format": self.format,
            "n_edits": self.n_edits,
            "syntax_error": self.syntax_error,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Action:
        return cls(
            plan=data["plan"],
            code=data["code"],
            format=data["format"],
            n_edits=data["n_edits"],
            syntax_error=data["syntax_error"],
        )


@dataclass(frozen=True)
class _Fence:
    label: str  # the info string's first word, lower-cased
    open_line: int  # 0-based index of the opening line
    close_line: int
    body: tuple[str, ...]

    @property
    def has_edits(self) -> bool:
        return any(_SEARCH_RE.match(line) for line in self.body)


@dataclass(frozen=True)
class _Edit:
    number: int  # 1-based, in the order written
    line: int  # 1-based line of its SEARCH marker in the completion
    search: tuple[str, ...]
    replace: tuple[str, ...]


def parse_completion(
    completion: str | bytes | None,
    stage: str,
    base_code: str | None = None,
    *,
    max_chars: int = DEFAULT_MAX_CHARS,
) -> Action:
    """The Action a completion asks for, or ActionFormatError saying why there is none.

    `base_code` is the target node's script; required for debug and improve.
    """
    if stage not in STAGES:
        raise ValueError(f"stage must be one of {', '.join(STAGES)}; got {stage!r}")
    if stage != "draft" and base_code is None:
        raise ValueError(f"a {stage} step needs base_code, the target node's script")
    text = _as_text(completion, max_chars)
    lines = text.split("\n")
    fences = _scan_fences(lines)
    if any(_SEARCH_RE.match(line) for line in lines):
        return _parse_edits(lines, fences, stage, _normalize_newlines(base_code or ""))
    action = _parse_script(lines, fences)
    if base_code is not None and stage != "draft" and _same_script(action.code, base_code):
        raise ActionFormatError(
            "no_change", "the script is identical to the current one; change something or fix the bug"
        )
    return action


def _normalize_newlines(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _as_text(completion: str | bytes | None, max_chars: int) -> str:
    if completion is None:
        raise ActionFormatError("empty", "the completion is empty")
    if isinstance(completion, (bytes, bytearray)):
        # UTF-8 spends at most 4 bytes a character: anything longer is over the limit.
        if len(completion) > 4 * max_chars:
            raise ActionFormatError(
                "too_long", f"the completion has {len(completion)} bytes; the limit is {max_chars} characters"
            )
        try:
            completion = bytes(completion).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ActionFormatError(
                "not_text",
                f"the completion is not UTF-8 text: byte 0x{exc.object[exc.start]:02x} at offset {exc.start}",
            ) from None
    if not isinstance(completion, str):
        raise TypeError(f"a completion is str or bytes; got {type(completion).__name__}")
    if len(completion) > max_chars:
        raise ActionFormatError(
            "too_long", f"the completion has {len(completion)} characters; the limit is {max_chars}"
        )
    try:
        completion.encode("utf-8")
    except UnicodeEncodeError as exc:  # lone surrogates cannot be stored or hashed as UTF-8
        raise ActionFormatError(
            "not_text", f"the completion is not valid Unicode text: a lone surrogate at offset {exc.start}"
        ) from None
    text = _normalize_newlines(completion.removeprefix("\ufeff"))
    if not text.strip():
        raise ActionFormatError("empty", "the completion is empty")
    return text


def _scan_fences(lines: list[str]) -> list[_Fence]:
    """Every fenced block, by CommonMark's rule: a fence closes at the first line of
    only backticks, at least as many as opened it."""
    fences = []
    i = 0
    while i < len(lines):
        opened = _OPEN_RE.match(lines[i])
        if not opened:
            i += 1
            continue
        ticks = len(opened.group(1))
        j = i + 1
        while j < len(lines):
            closed = _CLOSE_RE.match(lines[j])
            if closed and len(closed.group(1)) >= ticks:
                break
            j += 1
        if j == len(lines):
            label = opened.group(2)
            raise ActionFormatError(
                "unterminated_fence",
                f"the code fence opened at line {i + 1} ({'`' * ticks}{label}) is never closed; "
                "the completion may have been cut off at its token limit",
            )
        fences.append(_Fence(opened.group(2).lower(), i, j, tuple(lines[i + 1:j])))
        i = j + 1
    return fences


def _python_fences(fences: list[_Fence]) -> list[_Fence]:
    code = [f for f in fences if not f.has_edits]
    labelled = [f for f in code if f.label in PYTHON_LABELS]
    return labelled or [f for f in code if f.label == ""]


def _parse_script(lines: list[str], fences: list[_Fence]) -> Action:
    candidates = _python_fences(fences)
    if not candidates:
        if fences:
            labels = ", ".join(sorted({f"```{f.label}" for f in fences}))
            raise ActionFormatError(
                "no_code",
                f"the completion has no Python code block (only {labels}); put the complete "
                "script in one ```python block",
            )
        raise ActionFormatError(
            "no_code",
            "the completion has no fenced code block: write the plan, then the complete "
            "script in one ```python block",
        )
    if len(candidates) > 1:
        where = ", ".join(f"lines {f.open_line + 1}-{f.close_line + 1}" for f in candidates)
        raise ActionFormatError(
            "multiple_code_blocks",
            f"the completion has {len(candidates)} Python code blocks ({where}); which one is the "
            "script? Give exactly one block with the complete script",
        )
    fence = candidates[0]
    code = "\n".join(fence.body)
    if not code.strip():
        raise ActionFormatError("empty_code", f"the code block at line {fence.open_line + 1} is empty")
    if not code.endswith("\n"):
        code += "\n"
    plan = "\n".join([*lines[:fence.open_line], *lines[fence.close_line + 1:]]).strip()
    return Action(plan=plan, code=code, format="script", syntax_error=_syntax_error(code))


def _parse_edits(lines: list[str], fences: list[_Fence], stage: str, base_code: str) -> Action:
    if stage == "draft":
        raise ActionFormatError(
            "edits_in_draft",
            "the completion has SEARCH/REPLACE edits, but a draft has no script to edit; "
            "write the complete script in one ```python block",
        )
    scripts = [f for f in _python_fences(fences) if f.label in PYTHON_LABELS]
    if scripts:
        raise ActionFormatError(
            "mixed_formats",
            f"the completion has both SEARCH/REPLACE edits and a Python code block (line "
            f"{scripts[0].open_line + 1}); give either edits or one complete script, not both",
        )
    # The fence lines around edit blocks are packaging, neither plan nor edit.
    skip = {i for f in fences if f.has_edits for i in (f.open_line, f.close_line)}
    edits, plan = _read_edits([(i, line) for i, line in enumerate(lines) if i not in skip])
    code = base_code
    for edit in edits:
        code = _apply_edit(code, edit)
    if code == base_code:
        raise ActionFormatError("no_change", "the edits do not change the script")
    if not code.strip():
        raise ActionFormatError("empty_code", "the edits leave the script empty")
    return Action(plan=plan, code=code, format="edits", n_edits=len(edits), syntax_error=_syntax_error(code))


def _read_edits(numbered: list[tuple[int, str]]) -> tuple[list[_Edit], str]:
    """The edit blocks, in order, and the prose around them (the plan)."""
    edits: list[_Edit] = []
    plan: list[str] = []
    part = "prose"  # prose -> search -> replace -> prose
    start = 0
    search: list[str] = []
    replace: list[str] = []

    def malformed(problem: str) -> ActionFormatError:
        return ActionFormatError("malformed_edit", f"edit {len(edits) + 1} (line {start}): {problem}")

    for i, line in numbered:
        is_search, is_divider, is_replace = (
            bool(_SEARCH_RE.match(line)), bool(_DIVIDER_RE.match(line)), bool(_REPLACE_RE.match(line))
        )
        if part == "prose":
            if is_search:
                part, start, search = "search", i + 1, []
            elif is_replace:
                raise ActionFormatError(
                    "malformed_edit", f"line {i + 1}: `>>>>>>> REPLACE` without a `<<<<<<< SEARCH` before it"
                )
            else:  # a lone `=======` in prose is a Markdown heading underline
                plan.append(line)
        elif part == "search":
            if is_divider:
                part, replace = "replace", []
            elif is_search or is_replace:
                raise malformed(f"line {i + 1} has {line.strip()!r} before the `=======` divider")
            else:
                search.append(line)
        elif is_replace:
            if not any(s.strip() for s in search):
                raise ActionFormatError(
                    "empty_search",
                    f"edit {len(edits) + 1} (line {start}) has an empty SEARCH section; quote the exact "
                    "lines of the script to replace",
                )
            edits.append(_Edit(len(edits) + 1, start, tuple(search), tuple(replace)))
            part = "prose"
        elif is_search or is_divider:
            raise malformed(f"line {i + 1} has {line.strip()!r} before `>>>>>>> REPLACE`")
        else:
            replace.append(line)
    if part != "prose":
        missing = "`=======`" if part == "search" else "`>>>>>>> REPLACE`"
        raise malformed(f"it never reaches {missing}; the completion may have been cut off")
    return edits, "\n".join(plan).strip()


def _find_lines(haystack: list[str], needle: tuple[str, ...] | list[str], limit: int = 2) -> list[int]:
    """0-based line numbers where `needle` occurs as whole consecutive lines, at most `limit`.

    str.find on newline-delimited text keeps this linear in practice, even for
    a 200k-character script and an adversarial SEARCH section.
    """
    text = "\n" + "\n".join(haystack) + "\n"
    pattern = "\n" + "\n".join(needle) + "\n"
    found: list[int] = []
    start = 0
    while len(found) < limit:
        at = text.find(pattern, start)
        if at < 0:
            break
        found.append(text.count("\n", 0, at))
        start = at + 1
    return found


def _indent(line: str) -> str:
    return line[: len(line) - len(line.lstrip(" \t"))]


def _reindent(found: list[str], search: tuple[str, ...], replace: tuple[str, ...]) -> tuple[str, ...] | None:
    """`replace` moved by the one leading prefix that turns every non-blank SEARCH line into
    the script's `found` line (added where the script is deeper, taken off where the SEARCH
    is); None when the lines differ by different amounts, or a REPLACE line lacks the
    prefix to take off."""
    pairs = [(_indent(f), _indent(q)) for f, q in zip(found, search) if q.strip()]
    if not pairs:
        return None
    script, quoted = pairs[0]
    if script.endswith(quoted):
        extra, deeper = script[: len(script) - len(quoted)], True
    elif quoted.endswith(script):
        extra, deeper = quoted[: len(quoted) - len(script)], False
    else:
        return None
    if deeper and any(f != extra + q for f, q in pairs) or not deeper and any(q != extra + f for f, q in pairs):
        return None
    if deeper:
        return tuple(extra + line if line.strip() else line for line in replace)
    if any(line.strip() and not line.startswith(extra) for line in replace):
        return None
    return tuple(line[len(extra):] if line.strip() else line for line in replace)


def _apply_edit(code: str, edit: _Edit) -> str:
    lines = code.split("\n")
    for level in ("exact", "trailing", "indent"):
        replace: tuple[str, ...] | None = tuple(edit.replace)
        if level == "exact":
            at = _find_lines(lines, edit.search)
        elif level == "trailing":
            at = _find_lines([s.rstrip() for s in lines], [s.rstrip() for s in edit.search])
        else:
            at = _find_lines([s.strip() for s in lines], [s.strip() for s in edit.search])
            if len(at) == 1:
                replace = _reindent(lines[at[0]:at[0] + len(edit.search)], tuple(edit.search), replace)
                if replace is None:
                    break  # quoted at another depth line by line: not one block moved; not found
        if len(at) == 1:
            pos = at[0]
            return "\n".join([*lines[:pos], *replace, *lines[pos + len(edit.search):]])
        if len(at) > 1:
            raise ActionFormatError(
                "search_ambiguous",
                f"edit {edit.number} (line {edit.line}): its SEARCH text matches more than once in the "
                f"current script (at lines {at[0] + 1} and {at[1] + 1}); include more lines to make it unique",
            )
    first = next((s.strip() for s in edit.search if s.strip()), "")
    if len(first) > 120:
        first = first[:117] + "..."
    raise ActionFormatError(
        "search_not_found",
        f"edit {edit.number} (line {edit.line}): its SEARCH text is not in the current script "
        f"(first line searched: {first!r}); copy the lines exactly from the script",
    )


def _same_script(a: str, b: str) -> bool:
    """Equal up to line endings, trailing whitespace and blank lines at either end."""

    def canonical(code: str) -> str:
        return "\n".join(line.rstrip() for line in _normalize_newlines(code).split("\n")).strip("\n")

    return canonical(a) == canonical(b)


def _syntax_error(code: str) -> str | None:
    """None if the script compiles, else where and why it does not."""
    try:
        compile(code, "<script>", "exec", dont_inherit=True)
    except SyntaxError as exc:
        return f"line {exc.lineno}: {exc.msg}"
    except (ValueError, RecursionError, MemoryError, OverflowError) as exc:
        # null bytes, or nesting too deep for the compiler: Python will refuse it too.
        return f"{type(exc).__name__}: {exc}"
    return None


# --- writing actions: the inverse of parsing ---


@dataclass(frozen=True)
class EditBlock:
    """One SEARCH/REPLACE edit; `base_lines` are the 0-based lines of the base script its
    SEARCH quotes (lines an earlier edit wrote are not among them)."""

    search: tuple[str, ...]
    replace: tuple[str, ...]
    base_lines: tuple[int, ...]


def edit_blocks(base_code: str, code: str, *, merge_gap: int = 2) -> list[EditBlock]:
    """Edits that turn `base_code` into `code`, for format B: a line diff whose changes less
    than `merge_gap` unchanged lines apart share one block; each SEARCH is grown by
    neighbouring lines until it holds a non-blank line and matches exactly once in the
    script as the earlier edits leave it (the order `parse_completion` applies them in)."""
    import difflib

    old = _normalize_newlines(base_code).split("\n")
    new = _normalize_newlines(code).split("\n")
    hunks: list[list[int]] = []  # [i1, i2, j1, j2] in old and new coordinates
    matcher = difflib.SequenceMatcher(None, old, new, autojunk=False)
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op == "equal":
            continue
        if hunks and i1 - hunks[-1][1] <= merge_gap:
            hunks[-1][1], hunks[-1][3] = i2, j2
        else:
            hunks.append([i1, i2, j1, j2])
    current = list(old)
    origin: list[int | None] = list(range(len(old)))  # base line of each current line; None if written
    offset = 0
    blocks = []
    for k, (i1, i2, j1, j2) in enumerate(hunks):
        lo, hi = i1 + offset, i2 + offset
        replace = list(new[j1:j2])
        # Lines from the next hunk on will still change: a SEARCH may not grow into them.
        limit = hunks[k + 1][0] + offset if k + 1 < len(hunks) else len(current)
        while not any(s.strip() for s in current[lo:hi]) or len(_find_lines(current, current[lo:hi])) != 1:
            if hi < limit:
                replace.append(current[hi])
                hi += 1
            elif lo > 0:
                lo -= 1
                replace.insert(0, current[lo])
            else:
                raise ValueError("no unique SEARCH text for an edit: the script repeats itself throughout")
        blocks.append(EditBlock(tuple(current[lo:hi]), tuple(replace),
                                tuple(i for i in origin[lo:hi] if i is not None)))
        current[lo:hi] = replace
        origin[lo:hi] = [None] * len(replace)
        offset += (j2 - j1) - (i2 - i1)
    return blocks


def format_edits(blocks: list[EditBlock]) -> str:
    """The edit blocks as format B text, one blank line between blocks."""
    return "\n\n".join(
        "\n".join(["<<<<<<< SEARCH", *b.search, "=======", *b.replace, ">>>>>>> REPLACE"]) for b in blocks
    )


# Comment lines at the top of a script that its author keeps for itself: the template
# expert's `# template-spec: {json}` (the approach it took, read back on its next step) and
# `# Idea: ...`. The compact prompt does not show them and a short edit does not rewrite them
# (`write_action(keep_bookkeeping=True)`): together they are ~90 tokens of JSON and prose
# that a small model's completion budget cannot spare and that say nothing about the task.
BOOKKEEPING_PREFIXES = ("# template-spec: ", "# Idea: ")


def bookkeeping_lines(code: str) -> int:
    """How many of the script's first lines are bookkeeping comments (BOOKKEEPING_PREFIXES)."""
    n = 0
    lines = _normalize_newlines(code).split("\n")
    while n < len(lines) - 1 and lines[n].startswith(BOOKKEEPING_PREFIXES):
        n += 1
    return n


def keep_base_bookkeeping(base_code: str, code: str) -> str:
    """`code` with its bookkeeping lines replaced by `base_code`'s: the script a short edit
    from `base_code` to `code` gives (its author updates its own header outside the edit)."""
    base = _normalize_newlines(base_code).split("\n")
    new = _normalize_newlines(code).split("\n")
    return "\n".join([*base[:bookkeeping_lines(base_code)], *new[bookkeeping_lines(code):]])


def write_action(stage: str, plan: str, code: str, base_code: str | None = None, *,
                 keep_bookkeeping: bool = False) -> str:
    """A completion that `parse_completion` reads back as exactly (`plan`, `code`): for a
    draft, the plan and the script in one fence; for debug and improve, the plan and the
    edits from `base_code` to `code`. ValueError when no such text exists (the plan holds
    a fence or edit marker, the code equals the base, an edit marker is a line of code).

    `keep_bookkeeping` (debug and improve): the edits leave `base_code`'s bookkeeping lines as
    they are, so the completion reads back as `keep_base_bookkeeping(base_code, code)`."""
    if keep_bookkeeping and stage != "draft" and base_code is not None:
        code = keep_base_bookkeeping(base_code, code)
    if stage == "draft" or base_code is None:
        longest = max((len(run) for run in re.findall(r"`+", code)), default=0)
        ticks = "`" * max(3, longest + 1)
        text = f"{plan.strip()}\n\n{ticks}python\n{code}{'' if code.endswith(chr(10)) else chr(10)}{ticks}\n"
        fmt = "script"
    else:
        text = f"{plan.strip()}\n\n{format_edits(edit_blocks(base_code, code))}\n"
        fmt = "edits"
    try:
        action = parse_completion(text, stage, base_code)
    except ActionFormatError as exc:
        raise ValueError(f"the action cannot be written in format {fmt}: {exc.reason}") from None
    if action.code != code or action.plan != plan.strip() or action.format != fmt:
        raise ValueError(f"the action does not survive a round trip through format {fmt}")
    return text
