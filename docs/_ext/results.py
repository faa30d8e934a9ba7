"""The results log: one page under docs/results/ per committed benchmark result.

Every `benchmarks/results/<name>.json` (the convention of benchmarks/_record.py: `benchmark`,
`meta` with command, date, commit and machine, `table` with title, columns and rows, and
optionally `description` and more `tables`) becomes `docs/results/<name>.md` before Sphinx
reads the sources. Prose elsewhere cites these pages instead of restating their numbers.

A file that breaks the convention stops the build with its name and what is missing, so a
result the docs cannot show is found when it is committed. The pages are build products (not
committed): one is rewritten only when its text changes, and one whose JSON is gone is removed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sphinx.errors import ExtensionError

KEEP = {"index.md"}  # the hand-written page of docs/results/
HEADER = "<!-- Written by docs/_ext/results.py from {source} at build time; do not edit. -->\n\n"
META_FIELDS = ("command", "date", "commit", "machine")


def cell(value: Any) -> str:
    """A table cell: floats to 4 significant digits, None as "-", no Markdown-breaking characters."""
    if value is None:
        text = "-"
    elif isinstance(value, bool):
        text = "yes" if value else "no"
    elif isinstance(value, float):
        text = f"{value:.4g}"
    else:
        text = str(value)
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ").replace("\r", " ")


def check_table(table: Any, where: str) -> None:
    if not isinstance(table, dict) or not {"title", "columns", "rows"} <= set(table):
        raise ExtensionError(f"{where}: a table needs title, columns and rows (benchmarks/_record.py's table())")
    for i, row in enumerate(table["rows"]):
        if not isinstance(row, list) or len(row) != len(table["columns"]):
            raise ExtensionError(f"{where}: row {i} of table {table['title']!r} does not have "
                                 f"{len(table['columns'])} cells, one per column")


def load(path: Path) -> dict[str, Any]:
    """A result file, checked against the convention."""
    where = f"benchmarks/results/{path.name}"
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ExtensionError(f"{where}: not readable JSON ({exc})") from exc
    if not isinstance(record, dict):
        raise ExtensionError(f"{where}: expected a JSON object")
    missing = [k for k in ("benchmark", "meta", "table") if k not in record]
    missing += [f"meta.{k}" for k in META_FIELDS if k not in record.get("meta", {})]
    if missing:
        raise ExtensionError(f"{where}: missing {', '.join(missing)}; write it with "
                             "benchmarks/_record.py's write_result()")
    check_table(record["table"], where)
    for extra in record.get("tables", []):
        check_table(extra, where)
    return record


def markdown_table(table: dict[str, Any]) -> list[str]:
    lines = [f"### {cell(table['title'])}", ""]
    lines.append("| " + " | ".join(cell(c) for c in table["columns"]) + " |")
    lines.append("|" + "---|" * len(table["columns"]))
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in table["rows"]]
    return [*lines, ""]


def page(name: str, record: dict[str, Any]) -> str:
    meta = record["meta"]
    lines = [HEADER.format(source=f"benchmarks/results/{name}.json"), f"# {record['benchmark']}", ""]
    if record.get("description"):
        lines += [str(record["description"]), ""]
    lines += ["| | |", "|---|---|"]
    lines += [f"| {field} | {'`' + cell(meta[field]) + '`' if field in ('command', 'commit') else cell(meta[field])} |"
              for field in META_FIELDS]
    lines += ["", "## Results", ""]
    for table in [record["table"], *record.get("tables", [])]:
        lines += markdown_table(table)
    lines += [f"The whole record, with every figure the benchmark keeps: `benchmarks/results/{name}.json`. "
              "Rerun the command above from a checkout to measure it again.", ""]
    return "\n".join(lines)


def write_pages(srcdir: Path, results: Path) -> None:
    folder = srcdir / "results"
    folder.mkdir(parents=True, exist_ok=True)
    wanted = {f"{path.stem}.md": page(path.stem, load(path)) for path in sorted(results.glob("*.json"))}
    for old in folder.glob("*.md"):
        if old.name not in wanted and old.name not in KEEP:
            old.unlink()
    for name, text in wanted.items():
        if name in KEEP:
            raise ExtensionError(f"benchmarks/results/{name[:-3]}.json: that name is the results index's; rename it")
        path = folder / name
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")


def _on_config_inited(app, config) -> None:
    write_pages(Path(app.srcdir), Path(app.confdir).parent / "benchmarks" / "results")


def setup(app):
    # config-inited comes before Sphinx lists the source files, so the pages are found.
    app.connect("config-inited", _on_config_inited)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
