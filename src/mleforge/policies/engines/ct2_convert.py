"""Turning a transformers model into a CTranslate2 model: in memory, and cached on disk.

    convert_model(model, tokenizer, folder, "int8")      # any loaded causal LM, peft LoRA merged
    cached_conversion(config)                            # an hf/bundled folder (+ adapter), once

Conversion goes through ctranslate2's own `TransformersConverter`, handed the model we already
hold. Two of its habits would harm a model that lives on (a trainer's): its loaders delete each
layer's modules once read, and int8 (and int16) quantization scales float32 weights in place. So
it gets a structural copy (LoRA deltas merged into copies of the adapted weights, the original
adapter left as it was) whose other parameters are copies only where the conversion would change
them in place: an integer quantization of a model that lives on. A float conversion, or a model
that is discarded after (`keep_model=False`), shares the weights: a second float32 copy of the
whole model would be the conversion's largest allocation. The garbage collector's existing
objects are frozen while it runs (it calls `gc.collect()` once per layer, and each collection
walks every object of a process holding torch), and what it freed goes back to the system after
(mleforge.utils.memory).

The cache: `<models root>/ct2/<name>-<weights hash>-<quantization>/`, keyed by the SHA-256 of
the model folder's files and the adapter's. A conversion is written to a staging folder and
renamed into place with its marker (file sizes and fingerprints), so a half-written one never
has the final name; one whose files no longer match is rebuilt.
"""

from __future__ import annotations

import copy
import gc
import hashlib
import json
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mleforge.policies.base import PolicyError
from mleforge.policies.bundled import MARKER, models_root, remove_stale_partials
from mleforge.policies.engines.base import QUANTIZATIONS
from mleforge.policies.engines.transformers import load_model
from mleforge.policies.extras import import_ctranslate2
from mleforge.utils.memory import release_memory
from mleforge.utils.quiet import quiet_libraries

if TYPE_CHECKING:
    from mleforge.policies.hf_config import HFConfig

log = logging.getLogger(__name__)

CT2_MARKER = "mleforge-ct2.json"
_FINGERPRINT_BLOCKS = 8  # 64 KiB blocks read from each large file to check it at every load
_BLOCK = 64 << 10
_HASH_CHUNK = 8 << 20
_STALE_S = 3600


def default_quantization(device: str) -> str:
    """int8 on a CPU (several times faster than float32); float16 on a GPU."""
    return "int8" if device == "cpu" else "float16"


def architecture_converts(model_config: Any) -> bool:
    """Whether ctranslate2's converter knows this transformers config's class."""
    return config_class_converts(type(model_config).__name__)


def config_class_converts(name: str) -> bool:
    """Whether ctranslate2's converter knows the transformers config class named `name`."""
    from ctranslate2.converters import transformers as ct2_transformers

    # The converter has no public query; its registry is the dict it dispatches on.
    loaders = getattr(ct2_transformers, "_MODEL_LOADERS", None)
    return loaders is None or name in loaders


# --- in memory ---


def convert_model(model: Any, tokenizer: Any, folder: Path, quantization: str, *,
                  keep_model: bool = True) -> Path:
    """Write `model` (a transformers causal LM or a peft model, LoRA merged) as a ct2 model.

    `folder` is replaced if it exists. The model and its adapter are left untouched, unless
    `keep_model` is False (the caller discards the model after: its weights may be changed).
    """
    ct2 = import_ctranslate2()
    from ctranslate2.converters import TransformersConverter

    if quantization not in QUANTIZATIONS:
        raise PolicyError(f"quantization must be one of {', '.join(QUANTIZATIONS)}, "
                          f"got {quantization!r}")
    in_place = keep_model and quantization.startswith("int")  # int8*, int16 scale weights in place
    plain = _detached_copy(_base_model(model), copy_tensors=in_place)
    if not architecture_converts(plain.config):
        raise PolicyError(f"CTranslate2 {ct2.__version__} cannot convert "
                          f"{type(plain.config).__name__} models; use engine='transformers'")

    class InMemory(TransformersConverter):
        def load_model(self, model_class, model_name_or_path, **kwargs):
            return plain

        def load_tokenizer(self, tokenizer_class, model_name_or_path, **kwargs):
            return tokenizer

    with tempfile.TemporaryDirectory(prefix="mleforge-ct2-config-") as config_dir:
        plain.config.save_pretrained(config_dir)  # the converter reads the config from a folder
        with _frozen_gc(), quiet_libraries():
            InMemory(config_dir).convert(str(folder), quantization=quantization, force=True)
    plain = None  # the copy's own tensors (merged LoRA weights) go before the trim
    release_memory()  # the converter's buffers, freed, would stay resident in the C heap
    return folder


def _base_model(model: Any) -> Any:
    get_base = getattr(model, "get_base_model", None)  # a peft model
    return get_base() if callable(get_base) else model


def _detached_copy(module: Any, copies: dict[int, Any] | None = None, *, copy_tensors: bool = True) -> Any:
    """The module tree again, its parameters and buffers on the CPU (copied when
    `copy_tensors`, else the same tensors where they are on the CPU already; shared tensors
    stay shared, so tied embeddings stay tied), each LoRA layer replaced by its base layer with
    the active adapters' deltas merged into a copy of its weight."""
    copies = {} if copies is None else copies
    if _is_lora_layer(module):
        return _merged_copy(module, copies, copy_tensors)
    new = copy.copy(module)
    new._parameters = {k: _copied(v, copies, copy_tensors) for k, v in module._parameters.items()}
    new._buffers = {k: _copied(v, copies, copy_tensors) for k, v in module._buffers.items()}
    new._modules = {k: None if v is None else _detached_copy(v, copies, copy_tensors=copy_tensors)
                    for k, v in module._modules.items()}
    return new


def _copied(tensor: Any, copies: dict[int, Any], copy_tensors: bool) -> Any:
    if tensor is None:
        return None
    if id(tensor) not in copies:
        copies[id(tensor)] = tensor.detach().to("cpu", copy=copy_tensors)
    return copies[id(tensor)]


def _is_lora_layer(module: Any) -> bool:
    return hasattr(module, "lora_A") and hasattr(module, "get_base_layer")


def _merged_copy(layer: Any, copies: dict[int, Any], copy_tensors: bool) -> Any:
    import torch

    base = _detached_copy(layer.get_base_layer(), copies, copy_tensors=copy_tensors)
    if layer.disable_adapters:
        return base
    adapters = [a for a in layer.active_adapters
                if a in layer.lora_A and a not in layer.merged_adapters]
    variants = [a for a in adapters if a in getattr(layer, "lora_variant", {})]
    if variants:
        raise PolicyError(f"adapter(s) {', '.join(variants)} use a LoRA variant (DoRA...) "
                          f"that the ct2 conversion cannot merge; merge_and_unload() a copy "
                          f"of the model first")
    with torch.no_grad():
        weight = base._parameters["weight"].clone()  # not the shared copy: tied weights differ now
        bias = base._parameters.get("bias")
        for adapter in adapters:
            weight += layer.get_delta_weight(adapter).to("cpu", weight.dtype)
            if layer.lora_bias.get(adapter):
                bias = (bias if bias is not None else torch.zeros(weight.shape[0])) + \
                    (layer.lora_B[adapter].bias * layer.scaling[adapter]).to("cpu", weight.dtype)
    base._parameters = {**base._parameters, "weight": weight, "bias": bias}
    return base


@contextmanager
def _frozen_gc() -> Iterator[None]:
    gc.freeze()  # objects that exist now are skipped by the converter's gc.collect() calls
    try:
        yield
    finally:
        gc.unfreeze()


# --- cached on disk ---


@dataclass(frozen=True)
class CachedConversion:
    folder: Path
    quantization: str
    weights_sha256: str
    built: bool  # converted by this call (False: found in the cache)
    convert_s: float  # 0 when found


def cache_root(config: HFConfig) -> Path:
    return Path(config.ct2_cache).expanduser() if config.ct2_cache else models_root() / "ct2"


def cached_conversion(config: HFConfig, quantization: str) -> CachedConversion:
    """The ct2 conversion of `config`'s model (adapter merged), converted once per weights."""
    source = local_model_folder(config)
    adapter = Path(config.adapter).expanduser() if config.adapter else None
    if adapter is not None and not adapter.is_dir():
        raise PolicyError(f"LoRA adapter folder {config.adapter} does not exist")
    root = cache_root(config)
    root.mkdir(parents=True, exist_ok=True)
    digest = weights_sha256(source, adapter, root / "hashes.json")
    # A bundled model's folder is <name>/hf; its policy's name says more than "hf".
    label = config.name or (source.parent.name if source.name == "hf" else source.name)
    folder = root / f"{_slug(label)}-{digest[:16]}-{quantization}"
    problem = check_conversion(folder, digest, quantization)
    if problem is None:
        return CachedConversion(folder, quantization, digest, False, 0.0)
    if folder.exists():
        log.warning("the ct2 conversion at %s is unusable (%s); converting again", folder, problem)
    started = time.perf_counter()
    _build(config, source, adapter, folder, digest, quantization)
    return CachedConversion(folder, quantization, digest, True, time.perf_counter() - started)


def rebuild_conversion(config: HFConfig, found: CachedConversion, reason: str) -> CachedConversion:
    """Discard a cached conversion that failed to load, and convert again."""
    log.warning("the ct2 conversion at %s failed to load (%s); converting again", found.folder,
                reason)
    shutil.rmtree(found.folder, ignore_errors=True)
    return cached_conversion(config, found.quantization)


def _build(config: HFConfig, source: Path, adapter: Path | None, folder: Path, digest: str,
           quantization: str) -> None:
    remove_stale_partials(folder.parent, f".{folder.name}.", _STALE_S)
    log.info("converting %s to CTranslate2 %s (once per weights)", config.model, quantization)
    staging = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}.",
                                    suffix=".partial"))
    try:
        # float32 on the CPU: the weights exactly as saved, quantized by ctranslate2 itself.
        model, tokenizer = load_model(config, device="cpu", dtype="float32")
        convert_model(model, tokenizer, staging, quantization, keep_model=False)  # no copy: it goes now
        del model
        release_memory()
        marker = {"weights_sha256": digest, "quantization": quantization,
                  "model": config.model, "adapter": str(adapter) if adapter else None,
                  "ctranslate2": import_ctranslate2().__version__,
                  "files": {p.name: _file_record(p) for p in sorted(staging.iterdir())}}
        (staging / CT2_MARKER).write_text(json.dumps(marker, indent=1))  # last: complete
        for path in (staging, *staging.iterdir()):  # private by default; the cache may be shared
            path.chmod(0o755 if path.is_dir() else 0o644)
        if check_conversion(folder, digest, quantization) is None:
            return  # another process finished first: keep theirs
        if folder.exists():
            shutil.rmtree(folder)  # unusable
        try:
            os.rename(staging, folder)
        except OSError:
            if check_conversion(folder, digest, quantization) is not None:
                raise  # not another process finishing first
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def check_conversion(folder: Path, digest: str, quantization: str) -> str | None:
    """Why the conversion in `folder` cannot be used, or None when it can.

    Every file must have its recorded size and fingerprint (a hash of its first and last
    blocks and a few between): cheap at each load, and it catches a truncated, zeroed or
    overwritten file, though not every flipped bit inside the weights.
    """
    try:
        marker = json.loads((folder / CT2_MARKER).read_text())
    except FileNotFoundError:
        return "no marker: never completed" if folder.exists() else "not converted yet"
    except (OSError, ValueError) as exc:
        return f"unreadable marker ({exc})"
    if marker.get("weights_sha256") != digest or marker.get("quantization") != quantization:
        return "it was converted from other weights or to another quantization"
    files = marker.get("files")
    if not isinstance(files, dict) or not files:
        return "the marker lists no files"
    for name, record in files.items():
        path = folder / name
        try:
            if _file_record(path) != record:
                return f"{name} changed since it was written"
        except OSError:
            return f"{name} is missing"
    return None


def _file_record(path: Path) -> dict[str, Any]:
    size = path.stat().st_size
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        if size <= 2 * _FINGERPRINT_BLOCKS * _BLOCK:
            digest.update(f.read())
        else:
            for k in range(_FINGERPRINT_BLOCKS):
                f.seek((size - _BLOCK) * k // (_FINGERPRINT_BLOCKS - 1))
                digest.update(f.read(_BLOCK))
    return {"size": size, "fingerprint": digest.hexdigest()}


# --- what the weights are ---


def local_model_folder(config: HFConfig) -> Path:
    """The folder holding `config.model`: itself, or its snapshot in the Hugging Face cache."""
    path = Path(config.model).expanduser()
    if path.is_dir():
        return path.resolve()
    if path.exists() or config.model.startswith((".", "/", "~")):
        raise PolicyError(f"{config.model} is not a model folder (a directory with config.json "
                          f"and weights)")
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(config.model, local_files_only=not config.download))
    except Exception as exc:  # the hub client raises several unrelated types for "not there"
        hint = ("it could not be downloaded either" if config.download else
                "pass download=True to fetch it, or give a local folder")
        raise PolicyError(f"model {config.model!r} is not a local folder and not in the "
                          f"local Hugging Face cache; {hint}. ({exc})") from None


def weights_sha256(model: Path, adapter: Path | None, memo: Path) -> str:
    """One SHA-256 over the model folder's model files and the adapter's (names, contents).

    Hashing gigabytes of weights at every load would cost more than loading them, so each
    file's hash is remembered in `memo` under its path, size, inode and modification time,
    and computed again only when one of those changes.
    """
    known = _read_memo(memo)
    seen: dict[str, Any] = {}
    whole = hashlib.sha256()
    folders = [("", model)] + ([("adapter/", adapter)] if adapter is not None else [])
    for prefix, folder in folders:
        for path in sorted(p for p in folder.iterdir() if _is_model_file(p)):
            real = path.resolve()  # hub snapshots are links into a blob store
            stat = real.stat()
            key = f"{real}:{stat.st_size}:{stat.st_ino}:{stat.st_mtime_ns}"
            seen[key] = known.get(key) or _sha256(real)
            whole.update(f"{prefix}{path.relative_to(folder).as_posix()}\0{seen[key]}\n".encode())
    if any(key not in known for key in seen):
        _write_memo(memo, {**known, **seen})
    return whole.hexdigest()


_MODEL_SUFFIXES = (".json", ".safetensors", ".txt", ".model", ".jinja", ".tiktoken")
_NOT_MODEL = ("trainer_state.json",)  # what a training checkpoint keeps beside its weights


def _is_model_file(path: Path) -> bool:
    """Weights, configs and tokenizer files: what a conversion reads. Not a checkpoint's
    optimizer state, not the bundled converter's marker (it names a library version)."""
    if not path.is_file() or path.name.startswith(".") or path.name in (MARKER, *_NOT_MODEL):
        return False
    if path.suffix == ".bin":  # pytorch_model*.bin or adapter_model.bin, not training_args.bin
        return path.name.startswith(("pytorch_model", "adapter_model"))
    return path.suffix in _MODEL_SUFFIXES


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _read_memo(memo: Path) -> dict[str, str]:
    try:
        data = json.loads(memo.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write_memo(memo: Path, data: dict[str, str]) -> None:
    """Atomically: two processes writing at once lose an entry at worst, never the file."""
    handle, temp = tempfile.mkstemp(dir=memo.parent, prefix=f".{memo.name}.", suffix=".partial")
    with os.fdopen(handle, "w") as out:
        json.dump(data, out)
    os.chmod(temp, 0o644)
    os.replace(temp, memo)


def _slug(text: str) -> str:
    kept = "".join(c if c.isalnum() or c in "._-" else "-" for c in text.lower())
    return kept.strip("-.")[:48] or "model"
