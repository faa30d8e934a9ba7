"""Library chatter kept off the terminal: the warnings, info logs and progress bars that
transformers, TRL, PEFT, accelerate, datasets and torch print around mleforge's own progress
(a deprecation inside transformers is not the user's to act on; a bar for loading 272
tensors says nothing).

`quiet_libraries()` is a context manager put around the calls that raise them: a model's
loading, a trainer's construction and its `train()`. Inside it, FutureWarning, UserWarning
and DeprecationWarning raised in those libraries' modules (and the few they attribute to the
caller's line, MESSAGES) are ignored, their loggers pass errors only, and the progress bars
of transformers and datasets are off. On leaving, each setting is as it was: nothing is
muted at import or for the rest of the process, and mleforge's own warnings, progress and
errors pass. MLEFORGE_VERBOSE=1 leaves everything as the libraries have it.

The settings are the process's (warning filters, loggers, the libraries' flags), and threads
enter it at once (a model generating on one while another trains): the first to enter mutes,
the last to leave restores, whatever their order, so that one thread's leaving neither
unmutes another's work nor leaves the filters on.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.util
import logging
import os
import sys
import threading
import warnings
from collections.abc import Iterator

LIBRARIES = ("transformers", "trl", "peft", "accelerate", "datasets", "torch", "huggingface_hub", "ctranslate2")
MODULES = rf"({'|'.join(LIBRARIES)})(\.|$)"
CATEGORIES = (FutureWarning, UserWarning, DeprecationWarning)
# Raised by a library but attributed (stacklevel) to the mleforge line that called it.
MESSAGES = (
    r"You are using 'rollout_func', which is an experimental feature",  # TRL, on our GRPOTrainer subclass
)
VERBOSE_ENV = "MLEFORGE_VERBOSE"
# Library modules that draw a bar with tqdm itself, past their library's switch (transformers'
# GGUF loader: "Converting and de-quantizing GGUF tensors..."): their `tqdm` is a disabled one inside.
OWN_TQDM = ("transformers.modeling_gguf_pytorch_utils",)

_lock = threading.Lock()
_depth = 0  # how many quiet_libraries() are open, in all threads
_muted: contextlib.ExitStack | None = None  # what restores the settings, while _depth > 0


def verbose() -> bool:
    return os.environ.get(VERBOSE_ENV, "").strip().lower() in ("1", "true", "yes", "on")


@contextlib.contextmanager
def quiet_libraries() -> Iterator[None]:
    """The libraries' warnings, info logs and progress bars off inside; as they were after."""
    if verbose():
        yield
        return
    _enter()
    try:
        yield
    finally:
        _leave()


def _enter() -> None:
    global _depth, _muted
    with _lock:
        if _depth == 0:
            with contextlib.ExitStack() as stack:  # unwound at once if muting fails half-way
                stack.enter_context(warnings.catch_warnings())
                stack.enter_context(_bars_off())
                stack.enter_context(_loggers_at(logging.ERROR))
                for category in CATEGORIES:
                    warnings.filterwarnings("ignore", category=category, module=MODULES)
                for message in MESSAGES:
                    warnings.filterwarnings("ignore", message=message)
                _muted = stack.pop_all()
        _depth += 1


def _leave() -> None:
    global _depth, _muted
    with _lock:
        _depth -= 1
        if _depth == 0:
            muted, _muted = _muted, None
            muted.close()


@contextlib.contextmanager
def _loggers_at(level: int) -> Iterator[None]:
    loggers = [logging.getLogger(name) for name in LIBRARIES]
    before = [logger.level for logger in loggers]
    transformers = _module("transformers")
    verbosity = transformers.utils.logging.get_verbosity() if transformers else None
    try:
        for logger in loggers:
            logger.setLevel(max(level, logger.getEffectiveLevel()))
        if transformers is not None:  # its own handler and level, under the "transformers" logger
            transformers.utils.logging.set_verbosity(max(level, verbosity))
        yield
    finally:
        for logger, old in zip(loggers, before):
            logger.setLevel(old)
        if transformers is not None:
            transformers.utils.logging.set_verbosity(verbosity)


@contextlib.contextmanager
def _bars_off() -> Iterator[None]:
    transformers = _module("transformers")
    datasets = sys.modules.get("datasets")  # imported by whoever builds a dataset; not for a bar
    bars = transformers is not None and transformers.utils.logging.is_progress_bar_enabled()
    data_bars = datasets is not None and not datasets.are_progress_bars_disabled()
    swapped = []
    try:
        if bars:
            transformers.utils.logging.disable_progress_bar()
        if data_bars:
            datasets.disable_progress_bars()
        for module in _own_tqdm_modules() if transformers is not None else ():
            swapped.append((module, module.tqdm))
            module.tqdm = functools.partial(module.tqdm, disable=True)
        yield
    finally:
        for module, original in swapped:
            module.tqdm = original
        if bars:
            transformers.utils.logging.enable_progress_bar()
        if data_bars:
            datasets.enable_progress_bars()


def _own_tqdm_modules() -> list:
    """The OWN_TQDM modules that import here and hold a `tqdm` (a later library may not)."""
    found = []
    for name in OWN_TQDM:
        try:
            module = importlib.import_module(name)
        except Exception:  # noqa: BLE001  a library version without it, or that fails to import it
            continue
        if callable(getattr(module, "tqdm", None)):
            found.append(module)
    return found


def _module(name: str):
    """`name` imported where it is installed (the callers are about to use it), else None."""
    if name in sys.modules:
        return sys.modules[name]
    if importlib.util.find_spec(name) is None:
        return None


    return importlib.import_module(name)
