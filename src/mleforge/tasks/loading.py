"""Resolve `module:function` strings of a task folder to callables."""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mleforge.errors import TaskSpecError

TASK_MODULE_PREFIX = "_mleforge_task_"


def load_callable(import_string: str, folder: Path, yaml_path: Path, key: str) -> Callable[..., Any]:
    """`file:function` names `<folder>/file.py` (dots for sub-folders); any other string is
    imported as `package.module:function`. The task folder's own file wins."""
    module_name, _, attr = import_string.partition(":")
    local = folder.joinpath(*module_name.split(".")).with_suffix(".py")
    if local.is_file():
        # A unique module name per file, so two tasks' prepare.py never shadow each other.
        digest = hashlib.sha1(str(local).encode()).hexdigest()[:12]
        unique = f"{TASK_MODULE_PREFIX}{digest}_{local.stem}"
        module = sys.modules.get(unique)
        if module is None:
            # A task's own files are code its author wrote, as __main__ is a script's: show the
            # deprecations of the task-author API they run into (Python shows __main__'s only).
            warnings.filterwarnings("default", category=DeprecationWarning, module=TASK_MODULE_PREFIX)
            spec = importlib.util.spec_from_file_location(unique, local)
            if spec is None or spec.loader is None:
                raise TaskSpecError(yaml_path, key, f"cannot load {local}")
            module = importlib.util.module_from_spec(spec)
            sys.modules[unique] = module
            try:
                spec.loader.exec_module(module)
            except Exception:
                del sys.modules[unique]
                raise
    else:
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise TaskSpecError(
                yaml_path, key,
                f"{import_string!r}: neither {local} exists nor can module {module_name!r} be imported ({exc})",
            ) from exc
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise TaskSpecError(yaml_path, key, f"{import_string!r}: {module_name} has no function {attr!r}")
    return fn
