"""The API reference's pages, one per package of mleforge, written before Sphinx reads the sources.

Each page holds an `automodule` for the package and for every module in it (subpackages
included), found from the files under src/mleforge, so a new module is documented without
editing the docs. The command-line modules (`mleforge.cli`) are left to the CLI reference,
and the built-in tasks' folders hold data preparers, not API.

The pages are build products (docs/api/*.rst, not committed): a page is rewritten only when
its text changes, so an unchanged tree does not make Sphinx re-read it, and a page whose
package is gone is removed.
"""

from __future__ import annotations

from pathlib import Path

PACKAGE = "mleforge"
# The zygote runs inside the warm pool's child process only (it reads what that process set up).
LEFT_OUT = ("mleforge.cli", "mleforge.__main__", "mleforge.tasks.builtin", "mleforge.sandbox.pool.zygote")
HEADER = ".. Written by docs/_ext/api_pages.py at build time; edit the docstrings instead.\n\n"
# The top-level modules (errors, paths, config, runs) share one page.
CORE = "core"


def module_names(src: Path) -> list[str]:
    """Every importable module of the package under `src`, packages before their modules."""
    names = []
    for path in sorted((src / PACKAGE).rglob("*.py")):
        parts = path.relative_to(src).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        if not any(name == out or name.startswith(out + ".") for out in LEFT_OUT):
            names.append(name)
    return sorted(set(names), key=lambda n: n.split("."))


def pages(src: Path) -> dict[str, str]:
    """Page name -> reStructuredText: one page per subpackage of mleforge, one for the rest."""
    groups: dict[str, list[str]] = {}
    for name in module_names(src):
        parts = name.split(".")
        top = parts[1] if len(parts) > 1 and (src / PACKAGE / parts[1]).is_dir() else CORE
        groups.setdefault(top, []).append(name)
    out = {}
    for top, names in groups.items():
        title = PACKAGE if top == CORE else f"{PACKAGE}.{top}"
        lines = [HEADER, title, "=" * len(title), ""]
        for name in names:
            if name != title:  # each module under a heading of its own, for the page's contents
                lines += [name, "-" * len(name), ""]
            lines += [f".. automodule:: {name}", "   :members:", "   :ignore-module-all:",
                      "   :show-inheritance:", ""]
        out[top] = "\n".join(lines)
    return out


def write_pages(srcdir: Path, src: Path) -> None:
    folder = srcdir / "api"
    folder.mkdir(parents=True, exist_ok=True)
    wanted = {f"{name}.rst": text for name, text in pages(src).items()}
    for old in folder.glob("*.rst"):
        if old.name not in wanted:
            old.unlink()
    for name, text in wanted.items():
        path = folder / name
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")


def _on_config_inited(app, config) -> None:
    write_pages(Path(app.srcdir), Path(app.confdir).parent / "src")


def setup(app):
    # config-inited comes before Sphinx lists the source files, so the pages are found.
    app.connect("config-inited", _on_config_inited)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
