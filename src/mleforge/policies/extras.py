"""The optional libraries a local model needs, imported on first use with an error that
names the extra to install: torch and transformers (`[train]`), ctranslate2 (`[fast]`)."""

from __future__ import annotations

from typing import Any

from mleforge.errors import MissingExtra


def import_torch_transformers() -> tuple[Any, Any]:
    """torch and transformers, or an error naming the extra that installs them."""
    try:
        import torch
    except ImportError:
        raise MissingExtra("torch", "train", "the hf policy") from None
    try:
        import transformers
    except ImportError:
        raise MissingExtra("transformers", "train", "the hf policy") from None
    return torch, transformers


def import_ctranslate2() -> Any:
    try:
        import ctranslate2
    except ImportError:
        raise MissingExtra("ctranslate2", "fast", "the ct2 engine") from None
    return ctranslate2
