"""The documentation: the site builds offline with warnings as errors (API reference from the
docstrings, CLI reference from the real parsers, results pages from benchmarks/results/*.json),
the results convention and its renderer, the docstring reader, and the README's example runs."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
DOCS_PACKAGES = ("sphinx", "myst_parser", "furo", "sphinxarg")


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _need_docs_extra() -> None:
    missing = [name for name in DOCS_PACKAGES if importlib.util.find_spec(name) is None]
    if missing:
        pytest.skip(f"the docs extra is not installed (missing {', '.join(missing)}): pip install -e '.[docs]'")


@pytest.fixture(scope="module")
def built_site(tmp_path_factory) -> Path:
    """The whole site, built once as a user would: sphinx-build -W, offline."""
    _need_docs_extra()
    out = tmp_path_factory.mktemp("docs")
    done = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html", str(DOCS),
         str(out / "html"), "-d", str(out / "doctrees")],
        capture_output=True, text=True, timeout=900,
    )
    assert done.returncode == 0, f"sphinx-build failed:\n{done.stdout[-4000:]}\n{done.stderr[-8000:]}"
    return out / "html"


def test_site_builds_with_every_part(built_site):
    for page in ("index", "getting-started", "cli", "benchmarks", "api/index", "results/index"):
        assert (built_site / f"{page}.html").is_file(), page
    for guide in sorted((DOCS / "guide").glob("*.md")):
        assert (built_site / "guide" / f"{guide.stem}.html").is_file(), guide.name
    index = (built_site / "index.html").read_text(encoding="utf-8")
    assert all(f'href="guide/{guide.stem}.html"' in index for guide in (DOCS / "guide").glob("*.md"))


def test_cli_reference_comes_from_the_parsers(built_site):
    from mleforge.cli.main import COMMANDS, build_parser

    html = re.sub(r"<[^>]+>", "", (built_site / "cli.html").read_text(encoding="utf-8"))
    parser = build_parser()
    train = parser._subparsers._group_actions[0].choices["train"]
    flags = [s for action in train._actions for s in action.option_strings if s.startswith("--")]
    assert "--group-size" in flags and "--sampler.kind" in flags
    for flag in flags:
        assert flag in html, f"{flag} of `mleforge train` is missing from the CLI reference"
    for command in COMMANDS:
        assert f"mleforge {command} [-h]" in html  # each command's usage line


def test_api_reference_documents_the_package(built_site):
    html = (built_site / "api" / "reward.html").read_text(encoding="utf-8")
    # a function's docstring and signature, found by autodoc in mleforge.reward.components
    assert 'id="mleforge.reward.components.sigmoid"' in html
    assert (built_site / "api" / "train.html").is_file()
    assert not (built_site / "api" / "cli.html").exists()  # the CLI reference covers the command


def test_every_committed_result_has_a_page(built_site):
    results = sorted((ROOT / "benchmarks" / "results").glob("*.json"))
    assert results, "no committed benchmark result"
    for path in results:
        record = json.loads(path.read_text(encoding="utf-8"))
        html = (built_site / "results" / f"{path.stem}.html").read_text(encoding="utf-8")
        assert record["meta"]["commit"] in html
        assert record["table"]["columns"][0] in html


def test_a_result_is_rendered_with_its_meta_and_table(tmp_path):
    _need_docs_extra()
    results = _load(DOCS / "_ext" / "results.py", "docs_results_ext")
    folder = tmp_path / "benchmarks"
    folder.mkdir()
    record = {
        "benchmark": "toy", "description": "What it measures.",
        "meta": {"command": "python benchmarks/toy.py --out x.json", "date": "2026-12-04T10:00:00+00:00",
                 "commit": "abc123", "machine": "2 cores"},
        "table": {"title": "seconds", "columns": ["case", "s", "ok"], "rows": [["a|b", 0.123456, True], ["c", None, 3]]},
    }
    (folder / "toy.json").write_text(json.dumps(record))
    src = tmp_path / "docs"
    (src / "results").mkdir(parents=True)
    (src / "results" / "index.md").write_text("# Results\n")
    (src / "results" / "gone.md").write_text("an old page whose JSON was removed\n")
    results.write_pages(src, folder)
    page = (src / "results" / "toy.md").read_text()
    assert "# toy\n" in page and "What it measures." in page
    assert "| command | `python benchmarks/toy.py --out x.json` |" in page
    assert "| commit | `abc123` |" in page
    assert "| case | s | ok |" in page
    assert "| a\\|b | 0.1235 | yes |" in page  # a pipe escaped, a float to 4 significant digits
    assert "| c | - | 3 |" in page
    assert not (src / "results" / "gone.md").exists()
    assert (src / "results" / "index.md").read_text() == "# Results\n"


@pytest.mark.parametrize(("broken", "message"), [
    ({"benchmark": "toy", "table": {"title": "t", "columns": ["a"], "rows": []}}, "missing meta"),
    ({"benchmark": "toy", "meta": {"command": "c", "date": "d", "commit": "x"},
      "table": {"title": "t", "columns": ["a"], "rows": []}}, "missing meta.machine"),
    ({"benchmark": "toy", "meta": {"command": "c", "date": "d", "commit": "x", "machine": "m"},
      "table": {"title": "t", "columns": ["a", "b"], "rows": [[1]]}}, "row 0 of table 't' does not have 2 cells"),
])
def test_a_result_that_breaks_the_convention_stops_the_build(tmp_path, broken, message):
    _need_docs_extra()
    from sphinx.errors import ExtensionError

    results = _load(DOCS / "_ext" / "results.py", "docs_results_ext")
    (tmp_path / "bad.json").write_text(json.dumps(broken))
    with pytest.raises(ExtensionError, match=re.escape(message)) as caught:
        results.write_pages(tmp_path / "docs", tmp_path)
    assert "benchmarks/results/bad.json" in str(caught.value)


def test_record_writes_the_convention(tmp_path):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        record_module = _load(ROOT / "benchmarks" / "_record.py", "bench_record")
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    table = record_module.table("t", ["a", "b"], [[1, 2.5]])
    out = tmp_path / "sub" / "r.json"
    written = record_module.write_result(out, "toy", table, argv=[str(ROOT / "benchmarks" / "toy.py"), "--n", "a b"],
                                         raw=[1, 2])
    assert json.loads(out.read_text()) == written
    assert written["benchmark"] == "toy" and written["raw"] == [1, 2]
    assert written["table"] == {"title": "t", "columns": ["a", "b"], "rows": [[1, 2.5]]}
    assert written["meta"]["command"] == "python benchmarks/toy.py --n 'a b'"
    assert set(written["meta"]) == {"command", "date", "commit", "machine"}
    assert re.fullmatch(r"[0-9a-f]{40}(-dirty)?|unknown", written["meta"]["commit"])
    with pytest.raises(ValueError, match="row 0 has 1 cells for 2 columns"):
        record_module.table("t", ["a", "b"], [[1]])
    # Lists of scalars go on one line each; anything else keeps json's indent; the value is the same.
    nested = {"rows": [[1, "a, b"], ["[x]", None]], "timeline": [[0.0, 7]], "deep": {"k": [{"v": [1]}]}}
    text = record_module.dumps(nested)
    assert json.loads(text) == nested
    # A string holding a bracket leaves its list as json wrote it (the pattern cannot tell it apart).
    assert '"rows": [\n    [1, "a, b"],\n    [\n      "[x]",\n      null\n    ]\n  ]' in text
    assert '"timeline": [\n    [0.0, 7]\n  ]' in text and '"v": [1]' in text
    assert out.read_text() == record_module.dumps(written) + "\n"


def test_docstrings_are_read_as_plain_text():
    reader = _load(DOCS / "_ext" / "docstrings.py", "docs_docstrings_ext")
    lines = [
        "Runs `Node`s with *args, |x| and name_ kept.",
        "    code = 1",
        "- an item that",
        "    goes on",
        "Back at the margin with ``` in prose.",
        "",
        "A title",
        "-------",
        "Body.",
    ]
    assert reader.plain_to_rst(lines) == [
        "Runs `Node`\\ s with \\*args, \\|x\\| and name\\_ kept.",
        "",
        "::",
        "",
        "        code = 1",
        "",
        "- an item that",
        "  goes on",
        "",
        "Back at the margin with \\`\\`\\` in prose.",
        "",
        "**A title**",
        "",
        "Body.",
    ]
    # a docstring that announces its literal block itself keeps it as it is
    assert reader.plain_to_rst(["Example::", "", "    code = 1", "Text."]) == [
        "Example::", "", "        code = 1", "", "Text."]


def test_readme_example_runs(data_root, tmp_path):
    """The README's Python example, as written, on a fresh data root."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert len(blocks) == 1, "the README has one Python example"
    code = blocks[0]
    assert 10 <= len(code.strip().splitlines()) <= 20
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    if done.returncode and "bwrap" in done.stderr and "SandboxError" in done.stderr:
        pytest.skip(f"bwrap does not work here: {done.stderr.strip().splitlines()[-1]}")
    assert done.returncode == 0, done.stderr[-4000:]
    steps = [line.split() for line in done.stdout.strip().splitlines()]
    assert [s[0] for s in steps] == ["0", "1", "2"]
    assert steps[0][1] == "valid"  # the template expert's first draft on titanic is a valid submission
    assert all(s[1] in ("valid", "format_error", "execution_error", "timeout", "invalid_submission") for s in steps)
