"""Sphinx configuration of mleforge's docs: MyST Markdown pages, the furo theme, the API
reference from the docstrings (autodoc), the CLI reference from the real argparse parsers
(sphinx-argparse), and results pages rendered from benchmarks/results/*.json.

Build (offline; warnings are errors, as in the tests):

    pip install -e '.[docs]'
    sphinx-build -W -b html docs docs/_build/html

Pages under api/ and results/ (all but their index.md) are written at build time by
_ext/api_pages.py and _ext/results.py and are not committed.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
# Document this checkout's package, whatever else is installed; the extensions live in _ext/.
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(DOCS / "_ext"))

project = "mleforge"
author = "the mleforge authors"
copyright = "2026, the mleforge authors"

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinxarg.ext",
    "api_pages",
    "docstrings",
    "results",
]

source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
root_doc = "index"
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store"]
templates_path: list[str] = []

myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3

# Docstrings are written with Markdown's `code` in mind: a single backquote reads as code.
default_role = "literal"

autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_default_options = {"members": True, "show-inheritance": True}
# The heavy extras are imported where used; a module that imports one at its top is still
# documented without it (its names are stood in for). Where an extra is installed, it is used.
autodoc_mock_imports = [name for name in (
    "torch", "transformers", "trl", "peft", "accelerate", "gguf", "ctranslate2", "ray", "verl",
    "pyarrow", "sentence_transformers", "mlebench", "matplotlib",
) if __import__("importlib.util").util.find_spec(name) is None]

html_theme = "furo"
html_title = "mleforge"
html_static_path: list[str] = []


class _GuideGlobLeftNothing(logging.Filter):
    """The guide's toctree lists its pages in reading order, then globs guide/* for the pages
    added later; when none is left over the glob matches nothing, which is no mistake. (Sphinx
    logs it without a type, so `suppress_warnings` cannot name it.)"""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (getattr(record, "subtype", None) == "empty_glob" and "'guide/*'" in record.getMessage())


def setup(app):
    logger = logging.getLogger("sphinx.sphinx.directives.other")
    if not any(isinstance(f, _GuideGlobLeftNothing) for f in logger.filters):
        logger.addFilter(_GuideGlobLeftNothing())
