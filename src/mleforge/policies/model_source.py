"""Trained checkpoints as a policy loads them: weights (a LoRA adapter, or a whole model) and
the base they were trained from.

mleforge's trainers (`mleforge sft`, `mleforge train`) write, beside the weights and the
tokenizer, a marker naming the base:

    <folder>/mleforge_model.json   {"format": "mleforge-checkpoint", "version": 1,
                                    "weights": "adapter" | "full",
                                    "base": "bundled:qwen2.5-coder-0.5b" | "hf:/abs/folder" | null}

An adapter checkpoint holds peft's adapter_config.json and adapter_model.safetensors; its base
may itself be a checkpoint (a GRPO adapter trained on top of an SFT one), resolved in turn,
innermost first. A full checkpoint is an ordinary transformers folder; its base is
provenance only. A plain peft adapter folder without the marker names its base in
adapter_config.json's `base_model_name_or_path`.

`resolve_model(spec)` turns `bundled:NAME`, `hf:PATH` or a bare folder into the base folder
to load, the adapters to apply on it in order, and the folder of the tokenizer.
`check_model_spec(spec)` says what is wrong with a spec without loading or converting anything.
Only the standard library is imported here (and `mleforge.policies.bundled`, which imports no more).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mleforge.policies.base import PolicyError
from mleforge.policies.bundled import (
    conversion_id,
    get_bundled,
    is_converted,
    locate_parts,
    models_root,
    prepare_bundled,
)

MARKER = "mleforge_model.json"
FORMAT = "mleforge-checkpoint"
VERSION = 1
WEIGHTS = ("adapter", "full")
ADAPTER_CONFIG = "adapter_config.json"
MODEL_CONFIG = "config.json"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")
MAX_DEPTH = 8  # checkpoints chained deeper than this are a loop or a mistake


@dataclass(frozen=True)
class ModelSource:
    """What to load: `base` (a transformers folder or hub id), then each of `adapters` on it
    (merged, innermost first), with the tokenizer of `tokenizer`."""

    spec: str
    base: str
    adapters: tuple[str, ...] = ()
    tokenizer: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"spec": self.spec, "base": self.base, "adapters": list(self.adapters), "tokenizer": self.tokenizer}


def write_marker(folder: str | Path, *, weights: str, base: str | None) -> Path:
    """Write a checkpoint's marker; `base` is the spec it was trained from (`bundled:NAME`,
    `hf:/abs/path`)."""
    if weights not in WEIGHTS:
        raise ValueError(f"weights must be one of {', '.join(WEIGHTS)}; got {weights!r}")
    path = Path(folder) / MARKER
    data: dict[str, Any] = {"format": FORMAT, "version": VERSION, "weights": weights, "base": base}
    trained_on = base_weights(base)  # which conversion of a bundled base it was trained on
    if trained_on is not None:
        data["base_weights"] = trained_on
    path.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    return path


def read_marker(folder: str | Path) -> dict[str, Any] | None:
    """The marker of a checkpoint folder, or None when it has none."""
    path = Path(folder) / MARKER
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise PolicyError(f"{path} is unreadable ({exc}); the checkpoint was not written completely") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT or data.get("weights") not in WEIGHTS:
        raise PolicyError(f"{path} is not an mleforge checkpoint marker (format {FORMAT!r}, weights adapter|full)")
    return data


def is_adapter_folder(folder: Path) -> bool:
    return (folder / ADAPTER_CONFIG).is_file() and not (folder / MODEL_CONFIG).is_file()


def _has_tokenizer(folder: Path) -> bool:
    return any((folder / name).is_file() for name in TOKENIZER_FILES)


def split_spec(spec: str) -> tuple[str, str]:
    """("bundled", NAME) or ("hf", PATH-or-hub-id); a bare folder is ("hf", folder)."""
    prefix, sep, rest = spec.partition(":")
    if sep and prefix in ("bundled", "hf"):
        if not rest:
            raise PolicyError(f"model {spec!r}: name the model after {prefix}:, as in "
                              "'bundled:qwen2.5-coder-0.5b' or 'hf:./checkpoint'")
        return prefix, rest
    if sep and prefix.isidentifier() and not Path(spec).exists():
        raise PolicyError(f"model {spec!r}: expected bundled:NAME or hf:PATH")
    return "hf", spec


def _adapter_base(folder: Path) -> str:
    marker = read_marker(folder)
    if marker is not None and marker.get("base"):
        mismatch = base_weights_mismatch(str(marker["base"]), marker.get("base_weights"))
        if mismatch:
            raise PolicyError(f"the adapter in {folder} was trained on {mismatch}. Train it again, or use it with "
                              f"the mleforge version it was trained with")
        return str(marker["base"])
    try:
        config = json.loads((folder / ADAPTER_CONFIG).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise PolicyError(f"{folder / ADAPTER_CONFIG} is unreadable ({exc})") from None
    base = config.get("base_model_name_or_path")
    if not base:
        raise PolicyError(f"the adapter in {folder} names no base model (no {MARKER}, and "
                          f"{ADAPTER_CONFIG} has no base_model_name_or_path)")
    return f"hf:{base}"


def base_weights(spec: str | None) -> dict[str, Any] | None:
    """Which conversion of a bundled model `spec` loads here (mleforge.policies.bundled.conversion_id);
    None for any other model: a folder's weights are what they are."""
    if not spec:
        return None
    kind, name = split_spec(spec)
    return conversion_id(name) if kind == "bundled" else None


def base_weights_mismatch(spec: str, recorded: dict[str, Any] | None) -> str | None:
    """None when weights trained on `spec` as `recorded` (a checkpoint's or a run's `base_weights`)
    are what `spec` loads here; else what differs. A record without `base_weights` is from before
    the conversions were told apart: the GGUF's weights as they are, embeddings untied."""
    here = base_weights(spec)
    if here is None:
        return None
    trained_on = recorded or {"gguf_sha256": here["gguf_sha256"], "embeddings": None}
    if trained_on == here:
        return None

    def embeddings(record: dict[str, Any]) -> str:
        return record.get("embeddings") or "as the GGUF has them (untied)"
    return (f"{spec} converted with embeddings {embeddings(trained_on)}, and this mleforge converts it with "
            f"embeddings {embeddings(here)}: on these weights it is another model")


def _bundled_folder(name: str, convert: bool) -> str:
    model = get_bundled(name)
    if convert:
        return str(prepare_bundled(name))
    folder = models_root() / name / "hf"
    if not is_converted(folder, model):
        locate_parts(model)  # raises naming the packages to install
    return str(folder)


def resolve_model(spec: str, *, convert: bool = True) -> ModelSource:
    """Where the weights of `spec` are (see the module docstring). `convert=False` checks a
    bundled model can be had without assembling or converting it."""
    chain: list[str] = []
    tokenizer = ""
    current = spec
    for _ in range(MAX_DEPTH):
        kind, name = split_spec(current)
        if kind == "bundled":
            base = _bundled_folder(name, convert)
            return ModelSource(spec, base, tuple(reversed(chain)), tokenizer or base)
        folder = Path(name).expanduser()
        if not folder.is_dir():
            if name.startswith((".", "/", "~")) or folder.exists():
                raise PolicyError(f"model {current!r}: {name} is not a folder")
            # a hub id: loaded from the local Hugging Face cache by the caller
            return ModelSource(spec, name, tuple(reversed(chain)), tokenizer or name)
        folder = folder.resolve()
        if not tokenizer and _has_tokenizer(folder):
            tokenizer = str(folder)
        if is_adapter_folder(folder):
            chain.append(str(folder))
            current = _adapter_base(folder)
            continue
        if not (folder / MODEL_CONFIG).is_file():
            raise PolicyError(f"model {current!r}: {folder} holds neither a model ({MODEL_CONFIG}) nor a "
                              f"LoRA adapter ({ADAPTER_CONFIG})")
        return ModelSource(spec, str(folder), tuple(reversed(chain)), tokenizer or str(folder))
    raise PolicyError(f"model {spec!r}: its checkpoints name bases more than {MAX_DEPTH} deep (a loop?)")


def check_model_spec(spec: str) -> ModelSource:
    """`resolve_model` without assembling or converting a bundled model: raises PolicyError
    (or BundledModelError, naming the packages to install) for a spec that cannot load."""
    return resolve_model(spec, convert=False)
