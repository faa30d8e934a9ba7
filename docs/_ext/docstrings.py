"""mleforge's docstrings, read as the plain text they are written as, for autodoc.

The docstrings are not reStructuredText: they write code in single backquotes, indent
examples and aligned lists by four spaces without a `::`, and use `*`, `|x|` and `name_`
as ordinary characters. Read as reStructuredText they would break (unexpected indentation,
undefined substitutions) or lose text. This hook turns each one into reStructuredText that
shows what its author wrote:

- an indented block (not the continuation of a list item) becomes a literal block;
- a list item's continuation lines are re-indented under the item;
- a title underlined with `---` or `===` becomes a bold line (a section cannot sit in a docstring);
- outside code spans, `*`, `|` and a word's trailing `_` are escaped, and a code span followed
  by letters (`` `Node`s ``) is closed before them.

Members that mleforge did not write (methods a scikit-learn base class generates on a
subclass) are left out: their docstrings cite another project's glossary.
"""

from __future__ import annotations

import re

BULLET = re.compile(r"^(?:[-*+]|\d+[.)])\s+")
UNDERLINE = re.compile(r"^(?:-{3,}|={3,}|~{3,})\s*$")
TRAILING_UNDERSCORE = re.compile(r"(\w)_(?=\W|$)")
BACKTICKS = re.compile(r"(`+)")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def escape_text(text: str, in_code: bool) -> tuple[str, bool]:
    """Escape reStructuredText's markup characters outside code spans; `in_code` carries a code
    span that a previous line of the paragraph opened. Returns the line and whether a span is open."""
    out = []
    for i, part in enumerate(BACKTICKS.split(text)):
        if i % 2:  # a run of backquotes
            if len(part) > 1:  # ``` is text here (a Markdown fence named in prose)
                out.append("\\`" * len(part) if not in_code else part)
                continue
            out.append("`")
            in_code = not in_code
            continue
        if in_code:
            out.append(part)
            continue
        if out and out[-1] == "`" and part[:1].isalnum():
            out.append("\\ ")  # `Node`s: the span ends before the letters
        part = part.replace("\\", "\\\\").replace("*", "\\*").replace("|", "\\|")
        out.append(TRAILING_UNDERSCORE.sub(r"\1\\_", part))
    return "".join(out), in_code


def plain_to_rst(lines: list[str]) -> list[str]:
    out: list[str] = []
    i, n = 0, len(lines)
    in_code = False
    item_indent = None  # the text column of the list item being continued
    while i < n:
        line = lines[i].rstrip()
        if not line.strip():
            out.append("")
            in_code, item_indent = False, None
            i += 1
            continue
        indent = _indent(line)
        previous = out[-1] if out else ""
        if indent > 0 and item_indent is not None and indent >= item_indent:
            text, in_code = escape_text(line.strip(), in_code)
            out.append(" " * item_indent + text)
            i += 1
            continue
        if indent > 0:
            # an indented block: kept as written, up to the next line back at the margin
            announced = next((line for line in reversed(out) if line.strip()), "").endswith("::")
            if previous.strip():
                out.append("")
            if not announced:  # a docstring already written as reStructuredText says `::` itself
                out += ["::", ""]
            while i < n and (not lines[i].strip() or _indent(lines[i]) > 0):
                out.append("    " + lines[i].rstrip() if lines[i].strip() else "")
                i += 1
            while out and not out[-1]:
                out.pop()
            out.append("")
            in_code, item_indent = False, None
            continue
        if i + 1 < n and UNDERLINE.match(lines[i + 1].strip()) and not BULLET.match(line):
            text, _ = escape_text(line.strip(), False)
            if previous.strip():
                out.append("")
            out += [f"**{text}**", ""]
            i += 2
            continue
        bullet = BULLET.match(line)
        if bullet:
            if previous.strip() and item_indent is None:
                out.append("")  # a list needs a blank line before it
            item_indent = bullet.end()
            in_code = False
            text, in_code = escape_text(line[bullet.end():], in_code)
            out.append(line[:bullet.end()] + text)
        else:
            if item_indent is not None:
                out.append("")  # back at the margin: the list is over
                item_indent = None
            text, in_code = escape_text(line, in_code)
            out.append(text)
        i += 1
    return out


def _process(app, what, name, obj, options, lines: list[str]) -> None:
    lines[:] = plain_to_rst(list(lines))


def _skip(app, what, name, obj, skip, options):
    module = getattr(obj, "__module__", None)
    if callable(obj) and isinstance(module, str) and not module.startswith("mleforge"):
        return True
    return None


def setup(app):
    app.connect("autodoc-process-docstring", _process)
    app.connect("autodoc-skip-member", _skip)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
