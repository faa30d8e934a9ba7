"""The Python that runs scripts: where it lives (to bind it into the sandbox) and how it is started."""

from __future__ import annotations

import functools
import json
import marshal
import os
import subprocess
import sys
from pathlib import Path

from mleforge.errors import SandboxError
from mleforge.sandbox.bwrap import SYSTEM_DIRS

_PREFIXES = "import sys, json; print(json.dumps([sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix]))"


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


@functools.lru_cache(maxsize=8)
def python_roots(python: str) -> tuple[str, ...]:
    """The folders the interpreter needs: its prefixes (a virtual environment and
    the installation it was made from), outside the system folders bound anyway.

    Only these folders are bound, so a virtual environment inside a project
    checkout exposes the environment, not the checkout.
    """
    if os.path.realpath(python) == os.path.realpath(sys.executable):
        prefixes = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix]
    else:
        try:
            out = subprocess.run(
                [python, "-c", _PREFIXES], capture_output=True, text=True, timeout=60,
                env={"PATH": os.defpath},
            )
            prefixes = json.loads(out.stdout)
        except (OSError, ValueError, subprocess.TimeoutExpired) as exc:
            raise SandboxError(f"cannot ask {python} where it is installed: {exc}") from exc
    prefixes.append(str(Path(os.path.realpath(python)).parent.parent))
    roots = sorted({os.path.realpath(p) for p in prefixes})
    if "/" in roots:
        raise SandboxError(f"{python} is installed at /; binding its prefix would expose the whole file system")
    roots = [r for r in roots if not any(_under(r, d) for d in SYSTEM_DIRS)]
    # A prefix inside another one is already bound.
    return tuple(r for r in roots if not any(o != r and _under(r, o) for o in roots))


@functools.lru_cache(maxsize=1)
def supervisor_source() -> str:
    return (Path(__file__).parent / "supervisor.py").read_text(encoding="utf-8")


def supervisor_command(python: str, run_id: str, config: dict) -> list[str]:
    """`-s`: no user site-packages; the script gets none of ours. The run id stands
    alone in the command line, which every fork of the run inherits."""
    return [python, "-u", "-s", "-c", supervisor_source(), run_id, marshal.dumps(config).hex()]


def exposes(roots: tuple[str, ...], private: Path) -> str | None:
    """The bound folder that contains `private`, if any."""
    private_s = os.path.realpath(private)
    for root in roots:
        if _under(private_s, root):
            return root
    return None
