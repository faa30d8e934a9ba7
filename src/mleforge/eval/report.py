"""Reports people read: Markdown and one self-contained HTML file from one or more run folders.

    write_report(["runs/eval/template", "runs/eval/qwen"], "runs/report")
    # -> report.md (+ the PNG files it links, beside it) and report.html (PNGs inlined as base64)

A report is a list of `Section`s made of blocks (text, tables, figures, callouts); the two
renderers know only blocks. Sections come from a registry keyed by run kind (`run.json`'s
`kind`): each registered function gets every loaded run of its kind, in the order given, and
returns sections or nothing, so one function can compare several runs side by side. The
evaluation's sections live in `mleforge.eval.sections`; another kind of run (training
curves, say) registers its own with `register_section("train", fn)`, or names its module
in `SECTION_MODULES` to have it imported on first use.
"""

from __future__ import annotations

import base64
import html
import importlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mleforge.errors import ConfigError
from mleforge.runs import RUN_RECORD

SECTION_MODULES = {"eval": "mleforge.eval.sections", "stepwise": "mleforge.eval.stepwise_report",
                   "train": "mleforge.eval.train_sections", "sft": "mleforge.eval.train_sections"}


# --- blocks and sections --------------------------------------------------------------------------


@dataclass(frozen=True)
class Text:
    text: str


@dataclass(frozen=True)
class Callout:
    """A warning a reader must not miss (contamination, missing runs)."""

    text: str
    level: str = "warning"  # "warning" | "note"


@dataclass(frozen=True)
class Table:
    columns: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]
    caption: str = ""


@dataclass(frozen=True)
class Figure:
    name: str  # file name stem, unique in the report
    png: bytes
    caption: str = ""


Block = Text | Callout | Table | Figure


@dataclass(frozen=True)
class Section:
    title: str
    blocks: tuple[Block, ...] = ()


SectionFn = Callable[[Sequence["LoadedRun"]], Sequence[Section]]
_SECTIONS: dict[str, list[SectionFn]] = {}


def register_section(kind: str, fn: SectionFn) -> None:
    """Add `fn` to the sections of runs of `kind`, after those already registered."""
    fns = _SECTIONS.setdefault(kind, [])
    if fn not in fns:
        fns.append(fn)


def sections_for(kind: str) -> list[SectionFn]:
    if kind not in _SECTIONS and kind in SECTION_MODULES:
        importlib.import_module(SECTION_MODULES[kind])
    return list(_SECTIONS.get(kind, []))


# --- loading runs ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class LoadedRun:
    """A run folder's records: `record` is its run.json; `files` its other top-level JSON
    files by stem (an evaluation's `aggregate` and `leaderboards`)."""

    path: str
    kind: str
    label: str
    record: dict[str, Any]
    files: dict[str, Any] = field(default_factory=dict)


def load_run(path: str | Path, label: str | None = None) -> LoadedRun:
    folder = Path(path)
    if folder.is_file():  # a record or aggregate file names its folder
        folder = folder.parent
    record_path = folder / RUN_RECORD
    if not record_path.is_file():
        raise ConfigError(f"{folder} is not a run folder (no run.json); give the folder an "
                          "`mleforge eval` (or another run) wrote")
    try:
        record = json.loads(record_path.read_text(encoding="utf-8"))
        files = {p.stem: json.loads(p.read_text(encoding="utf-8"))
                 for p in sorted(folder.glob("*.json")) if p.name != RUN_RECORD}
    except ValueError as exc:
        raise ConfigError(f"{folder}: a JSON file is malformed ({exc})") from None
    kind = str(record.get("kind", "unknown"))
    return LoadedRun(str(folder.resolve()), kind, label or str(record.get("policy") or folder.name), record, files)


def _unique_labels(runs: list[LoadedRun]) -> list[LoadedRun]:
    """Two runs with one label (the same policy) are told apart by their folder names."""
    labels = [r.label for r in runs]
    out = []
    for run in runs:
        if labels.count(run.label) > 1:
            run = LoadedRun(run.path, run.kind, f"{run.label} ({Path(run.path).name})", run.record, run.files)
        out.append(run)
    return out


def build_report(runs: Sequence[LoadedRun]) -> list[Section]:
    runs = _unique_labels(list(runs))
    sections: list[Section] = []
    for kind in dict.fromkeys(r.kind for r in runs):
        same = [r for r in runs if r.kind == kind]
        fns = sections_for(kind)
        if not fns:
            sections.append(Section(f"{kind} runs", (Callout(
                f"no report sections are registered for runs of kind {kind!r}: "
                + ", ".join(r.path for r in same), "note"),)))
        for fn in fns:
            sections.extend(fn(same))
    return sections


# --- rendering ---------------------------------------------------------------------------------------


def cell(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _md_cell(value: Any) -> str:
    return cell(value).replace("|", "\\|").replace("\n", " ")


def render_markdown(title: str, sections: Sequence[Section], figure_dir: str = ".") -> str:
    lines = [f"# {title}", ""]
    for section in sections:
        lines += [f"## {section.title}", ""]
        for block in section.blocks:
            if isinstance(block, Text):
                lines += [block.text, ""]
            elif isinstance(block, Callout):
                lines += [f"> **{block.level.capitalize()}:** {block.text}", ""]
            elif isinstance(block, Table):
                if block.caption:
                    lines += [f"*{block.caption}*", ""]
                lines.append("| " + " | ".join(_md_cell(c) for c in block.columns) + " |")
                lines.append("|" + "---|" * len(block.columns))
                lines += ["| " + " | ".join(_md_cell(v) for v in row) + " |" for row in block.rows]
                lines.append("")
            elif isinstance(block, Figure):
                lines += [f"![{block.name}]({figure_dir}/{block.name}.png)", ""]
                if block.caption:
                    lines += [f"*{block.caption}*", ""]
    return "\n".join(lines)


CSS = """
body { font-family: -apple-system, "Segoe UI", Roboto, "DejaVu Sans", Arial, sans-serif; color: #1f2328;
       margin: 0; background: #f6f8fa; }
main { max-width: 1240px; margin: 0 auto; padding: 28px 36px 60px; background: #fff; min-height: 100vh; }
h1 { font-size: 28px; margin: 0 0 4px; } .sub { color: #57606a; margin: 0 0 24px; font-size: 14px; }
h2 { font-size: 20px; border-bottom: 1px solid #d0d7de; padding-bottom: 6px; margin-top: 36px; }
.scroll { overflow-x: auto; margin: 10px 0 18px; }
table { border-collapse: collapse; font-size: 12.5px; width: auto; }
th, td { border: 1px solid #d0d7de; padding: 4px 7px; text-align: right; white-space: nowrap; }
th { white-space: normal; vertical-align: bottom; min-width: 48px; }
th { background: #eaeef2; } td:first-child, th:first-child { text-align: left; }
td:first-child { white-space: normal; max-width: 240px; }
tr:nth-child(even) td { background: #f6f8fa; }
.caption { color: #57606a; font-size: 13px; margin: 4px 0; }
.callout { border-left: 5px solid #cf222e; background: #ffebe9; padding: 10px 14px; margin: 12px 0;
           border-radius: 4px; font-size: 14px; }
.callout.note { border-color: #0969da; background: #ddf4ff; }
figure { margin: 14px 0 22px; text-align: center; } figure img { max-width: 100%; }
figcaption { color: #57606a; font-size: 13px; margin-top: 6px; }
p { line-height: 1.5; font-size: 14px; }
"""


def render_html(title: str, sections: Sequence[Section], subtitle: str = "") -> str:
    e = html.escape
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           f"<title>{e(title)}</title><style>{CSS}</style></head><body><main>",
           f"<h1>{e(title)}</h1>", f'<p class="sub">{e(subtitle)}</p>' if subtitle else ""]
    for section in sections:
        out.append(f"<section><h2>{e(section.title)}</h2>")
        for block in section.blocks:
            if isinstance(block, Text):
                out.append(f"<p>{e(block.text)}</p>")
            elif isinstance(block, Callout):
                out.append(f'<div class="callout {e(block.level)}"><b>{e(block.level.capitalize())}:</b> '
                           f"{e(block.text)}</div>")
            elif isinstance(block, Table):
                if block.caption:
                    out.append(f'<p class="caption">{e(block.caption)}</p>')
                head = "".join(f"<th>{e(str(c))}</th>" for c in block.columns)
                body = "".join("<tr>" + "".join(f"<td>{e(cell(v))}</td>" for v in row) + "</tr>"
                               for row in block.rows)
                out.append(f'<div class="scroll"><table><thead><tr>{head}</tr></thead>'
                           f"<tbody>{body}</tbody></table></div>")
            elif isinstance(block, Figure):
                data = base64.b64encode(block.png).decode("ascii")
                out.append(f'<figure><img alt="{e(block.caption)}" src="data:image/png;base64,{data}">'
                           f"<figcaption>{e(block.caption)}</figcaption></figure>")
        out.append("</section>")
    out.append("</main></body></html>")
    return "\n".join(out)


@dataclass(frozen=True)
class WrittenReport:
    markdown: str
    html: str
    figures: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"markdown": self.markdown, "html": self.html, "figures": list(self.figures)}


def write_report(paths: Sequence[str | Path], out_dir: str | Path, *, labels: Sequence[str] | None = None,
                 title: str | None = None) -> WrittenReport:
    """Load the runs, build the sections, write report.md (+ PNGs beside it) and report.html."""
    if not paths:
        raise ConfigError("name at least one run folder")
    if labels is not None and len(labels) != len(paths):
        raise ConfigError(f"got {len(labels)} labels for {len(paths)} runs; give one label per run")
    runs = [load_run(p, labels[i] if labels else None) for i, p in enumerate(paths)]
    sections = build_report(runs)
    title = title or ("Evaluation: " + " vs ".join(r.label for r in _unique_labels(runs)))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    figures = []
    for section in sections:
        for block in section.blocks:
            if isinstance(block, Figure):
                path = out / f"{block.name}.png"
                path.write_bytes(block.png)
                figures.append(str(path))
    subtitle = "Runs: " + "; ".join(r.path for r in runs)
    md = out / "report.md"
    md.write_text(render_markdown(title, sections), encoding="utf-8")
    page = out / "report.html"
    page.write_text(render_html(title, sections, subtitle), encoding="utf-8")
    return WrittenReport(str(md), str(page), tuple(figures))
