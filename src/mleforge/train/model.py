"""Loading a model for training, and saving what training made so `hf:<folder>` loads it.

    check_model(config)          what would load, or an error that says why not (no torch)
    load_for_training(config)    the model, its tokenizer and the LoRA config (None: full)
    load_for_training(config, scratch=FOLDER)
                                 the same, its weights memory-mapped from a file even where
                                 adapters were merged into them (below)
    save_trained(...)            the weights (an adapter, or the whole model), the tokenizer
                                 and the marker naming the base (mleforge.policies.model_source)

`bundled:NAME` is the bundled model's transformers folder (converted once from its GGUF,
dequantized: a packed GGUF can be neither trained nor saved); `hf:PATH` a transformers
folder, a `.gguf` file (dequantized on load), or a checkpoint of `mleforge sft`/`train`
(its base loaded and its adapters merged, so a new LoRA trains on top). Precision: float32
on a CPU unless it computes bfloat16 natively (AVX-512 BF16 or AMX), where bf16 autocast
helps; without them bfloat16 matmuls are several times slower than float32.

Frozen weights on a file. transformers memory-maps a safetensors file, so the weights of a
plain float32 folder are the file's pages: clean, so the kernel may drop them and read them
again, where the process's own memory stays until it is freed (or swapped). Merging a
checkpoint's adapters writes into them, and a cast (a bfloat16 folder trained in float32) or a
dequantized GGUF makes new ones: then they are the process's own memory (2 GB for a float32
Qwen-0.5B). With `scratch` (a single process's run, on Linux, on a disk: not a tmpfs), the
weights of a LoRA run on a CPU that are not a file's already are written there once, loaded
again memory-mapped, and the file deleted at once: its 2 GB stay on the disk, out of sight of
`du`, until the process ends, and a killed process leaves nothing. A GRPO step then drops the
frozen weights' pages from its resident set while its rollout engine, which holds its own copy,
generates (mleforge.utils.memory.release_file_pages), and the update reads them back from the
page cache, or from the disk where the kernel took the cache for something else meanwhile.
"""

from __future__ import annotations

import importlib.util
import logging
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mleforge.errors import MissingExtra, MleforgeError
from mleforge.policies.model_source import (
    ModelSource,
    check_model_spec,
    resolve_model,
    split_spec,
    write_marker,
)
from mleforge.train.config import ModelConfig
from mleforge.train.errors import TrainError
from mleforge.utils.quiet import quiet_libraries

log = logging.getLogger(__name__)
TRAIN_PACKAGES = ("torch", "transformers", "trl", "peft", "datasets", "accelerate")
CPU_BF16_FLAGS = ("avx512_bf16", "amx_bf16")


def require_train_extra(purpose: str) -> None:
    """Raise MissingExtra (naming `mleforge[train]`) unless every training package is there.
    Looks the packages up without importing them."""
    for package in TRAIN_PACKAGES:
        if importlib.util.find_spec(package) is None:
            raise MissingExtra(package, "train", purpose)


def cpu_has_bf16(cpuinfo: str | None = None) -> bool:
    """Whether this CPU computes bfloat16 natively (its flags name AVX-512 BF16 or AMX)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return False
    flags = set(cpuinfo.split())
    return any(flag in flags for flag in CPU_BF16_FLAGS)


def check_model(config: ModelConfig) -> ModelSource:
    """Where `config.spec`'s weights are, without loading or converting anything; a
    TrainError that names the fix when it cannot load."""
    try:
        kind, name = split_spec(config.spec)
        if kind == "hf" and name.endswith(".gguf"):
            if not Path(name).expanduser().is_file():
                raise TrainError(f"no GGUF file {name}")
            return ModelSource(config.spec, str(Path(name).expanduser().resolve()))
        source = check_model_spec(config.spec)
        hub_id = not Path(source.base).is_absolute()  # folders (bundled ones too) resolve to absolute paths
        if hub_id and not _in_hub_cache(source.base):
            raise TrainError(f"--model {config.spec}: {source.base} is neither a folder nor in the local Hugging "
                             "Face cache; download it first (huggingface-cli download ...) or give a folder")
        return source
    except TrainError:
        raise
    except MleforgeError as exc:
        raise TrainError(f"--model {config.spec}: {exc}") from None


def _in_hub_cache(repo_id: str) -> bool:
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return False
    try:
        return isinstance(try_to_load_from_cache(repo_id, "config.json"), str)
    except ValueError:  # not a valid repo id
        return False


def base_spec_of(config: ModelConfig) -> str:
    """How a checkpoint trained from `config.spec` names its base: bundled models by name
    (portable across machines), folders by absolute path."""
    kind, name = split_spec(config.spec)
    if kind == "bundled":
        return config.spec
    path = Path(name).expanduser()
    return f"hf:{path.resolve()}" if path.exists() else f"hf:{name}"


def resolve_device(torch: Any, requested: str) -> str:
    if requested != "auto":
        if requested == "cuda" and not torch.cuda.is_available():
            raise TrainError("device cuda was asked for (the gpu-1x preset?), but torch sees no CUDA GPU; "
                             "use --preset cpu, or install a CUDA build of torch")
        return requested
    return "cuda" if torch.cuda.is_available() else "cpu"


def resolve_dtype(torch: Any, requested: str, device: str) -> Any:
    if requested != "auto":
        return getattr(torch, requested)
    if device.startswith("cuda"):
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return torch.float32


def resolve_bf16(requested: bool | None, device: str, torch: Any) -> bool:
    """bf16 mixed precision (autocast): on a GPU that supports it, on a CPU that computes it
    natively; off elsewhere (None: decide here)."""
    if requested is not None:
        return requested
    if device.startswith("cuda"):
        return bool(torch.cuda.is_bf16_supported())
    return cpu_has_bf16()


@dataclass
class TrainableModel:
    """A loaded model ready for a trainer. `peft_config` is the LoRA to train (None: train
    every weight); `base_spec` is what checkpoints name as their base."""

    model: Any
    tokenizer: Any
    peft_config: Any
    source: ModelSource
    base_spec: str
    device: str

    @property
    def full(self) -> bool:
        return self.peft_config is None


def load_for_training(config: ModelConfig, *, scratch: Path | None = None) -> TrainableModel:
    """Load `config.spec` (see the module docstring) in float32 on a CPU, bfloat16 on a GPU
    that has it; the adapters of a checkpoint are merged into the weights. With `scratch`, a
    LoRA run on a CPU whose weights are not a file's (adapters merged, a GGUF dequantized, a
    cast) gets them memory-mapped from a file written there and deleted at once (the module
    docstring; `scratch` is this process's own: <run>/frozen-weights).
    The libraries' warnings and loading bars stay off the terminal (mleforge.utils.quiet)."""
    require_train_extra("training a model")
    with quiet_libraries():
        return _load_for_training(config, scratch)


def _load_for_training(config: ModelConfig, scratch: Path | None = None) -> TrainableModel:
    import torch
    import transformers

    check_model(config)
    if config.threads:
        torch.set_num_threads(config.threads)
    device = resolve_device(torch, config.device)
    dtype = resolve_dtype(torch, config.dtype, device)
    kind, name = split_spec(config.spec)
    try:
        if kind == "hf" and name.endswith(".gguf"):
            path = Path(name).expanduser().resolve()
            source = ModelSource(config.spec, str(path.parent), (), str(path.parent))
            options: dict[str, Any] = {"gguf_file": path.name}
            tokenizer = transformers.AutoTokenizer.from_pretrained(path.parent, **options)
            model = transformers.AutoModelForCausalLM.from_pretrained(
                path.parent, dtype=dtype, quantization_config=transformers.GgufConfig(dequantize=True), **options)
        else:
            source = resolve_model(config.spec)
            tokenizer = transformers.AutoTokenizer.from_pretrained(source.tokenizer, local_files_only=True)
            model = transformers.AutoModelForCausalLM.from_pretrained(source.base, dtype=dtype, local_files_only=True)
    except (OSError, ValueError) as exc:
        raise TrainError(f"--model {config.spec} does not load: {exc}") from None
    if source.adapters:
        import peft

        for adapter in source.adapters:
            model = peft.PeftModel.from_pretrained(model, adapter).merge_and_unload()
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    if getattr(tokenizer, "chat_template", None) is None:
        raise TrainError(f"--model {config.spec}: its tokenizer has no chat template; train an instruct (chat) model")
    model.to(device)
    if scratch is not None and device == "cpu" and not config.full and wants_file(model, scratch):
        from mleforge.utils.memory import release_memory

        model = file_backed(model, dtype, scratch)
        release_memory()  # the process's own copy, 2 GB for a float32 Qwen-0.5B
    peft_config = None if config.full else lora_config(config, model)
    return TrainableModel(model, tokenizer, peft_config, source, base_spec_of(config), device)


def wants_file(model: Any, scratch: Path) -> bool:
    """Whether `model`'s weights should be written to `scratch` and mapped (the module
    docstring): on Linux, where they are not a file's unwritten pages already (a checkpoint's
    adapters merged, a GGUF dequantized, weights cast to another type) and `scratch` is on a
    disk: a file in tmpfs or ramfs is memory that no kernel reclaims without swap."""
    import sys

    from mleforge.utils.memory import file_backed_tensors, filesystem_type

    if not sys.platform.startswith("linux") or file_backed_tensors(model.parameters()):
        return False
    where = filesystem_type(scratch)
    if where in ("tmpfs", "ramfs"):
        log.info("the weights stay in memory: %s is on %s, where a file is memory too", scratch, where)
        return False
    return True


def file_backed(model: Any, dtype: Any, scratch: Path) -> Any:
    """`model` again, its weights memory-mapped from a safetensors file written into `scratch`
    (a folder this process owns: what a killed one left there goes first) and deleted once
    mapped, with `scratch` itself (the module docstring); `model` itself where the file cannot
    be written or read back (a full disk, say: training goes on, the weights in memory)."""
    import transformers

    shutil.rmtree(scratch, ignore_errors=True)
    try:
        scratch.mkdir(parents=True)
        model.save_pretrained(scratch)
        mapped = transformers.AutoModelForCausalLM.from_pretrained(scratch, dtype=dtype, local_files_only=True)
    except Exception as exc:  # noqa: BLE001  safetensors' own error on a full disk is no OSError
        log.warning("the weights could not be written to %s (%s): they stay in memory, %.1f GB more "
                    "resident while the rollouts generate", scratch, exc,
                    sum(p.numel() * p.element_size() for p in model.parameters()) / 1e9)
        return model
    finally:
        shutil.rmtree(scratch, ignore_errors=True)  # the mapping keeps the file's blocks
    # What PEFT records as the adapter's base and a checkpoint's card names: the model's own.
    mapped.config._name_or_path, mapped.name_or_path = model.config._name_or_path, model.name_or_path
    mapped.generation_config = model.generation_config
    return mapped


def lora_config(config: ModelConfig, model: Any) -> Any:
    """PEFT's LoraConfig for `config`; with `config.lora_layers`, on the last that many of
    `model`'s decoder layers only (all of them where it has fewer), by PEFT's
    `layers_to_transform`, which takes module names: "all-linear" becomes the names of the
    linear modules inside the decoder layers."""
    import peft

    targets: Any = config.target_modules
    if targets != "all-linear":
        targets = [t.strip() for t in targets.split(",") if t.strip()]
    layers = None
    if config.lora_layers is not None:
        total = decoder_layer_count(model)
        if config.lora_layers < total:  # else every layer: PEFT's usual path
            layers = list(range(total - config.lora_layers, total))
            if targets == "all-linear":
                targets = decoder_linear_names(model)
    return peft.LoraConfig(r=config.lora_rank, lora_alpha=config.alpha, lora_dropout=config.lora_dropout,
                           target_modules=targets, task_type="CAUSAL_LM", bias="none",
                           layers_to_transform=layers)


def decoder_layer_count(model: Any) -> int:
    """The number of decoder layers (the text model's `num_hidden_layers`)."""
    text = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    count = getattr(text, "num_hidden_layers", None)
    if not isinstance(count, int) or count < 1:
        raise TrainError("model.lora_layers: the model's config names no num_hidden_layers; leave lora_layers out")
    return count


def decoder_linear_names(model: Any) -> list[str]:
    """The last name part of every linear module inside a numbered decoder layer (q_proj,
    ..., down_proj for Qwen2 and Llama): what "all-linear" adapts there."""
    import re

    import torch

    names = {name.rsplit(".", 1)[-1] for name, module in model.named_modules()
             if isinstance(module, torch.nn.Linear) and re.search(r"\.\d+\.", f".{name}")}
    if not names:
        raise TrainError("model.lora_layers: found no linear modules inside numbered decoder layers; "
                         "name them with target_modules, or leave lora_layers out")
    return sorted(names)


def trainable_parameters(model: Any) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def save_trained(model: Any, tokenizer: Any, folder: str | Path, *, full: bool, base_spec: str) -> Path:
    """Write the trained weights (the adapter alone under LoRA), the tokenizer and the
    checkpoint marker into `folder`; `hf:<folder>` then loads it."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    unwrapped = model
    if full and hasattr(model, "merge_and_unload"):  # a PeftModel trained in full: save the merged whole
        unwrapped = model.merge_and_unload()
    unwrapped.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    write_marker(folder, weights="full" if full else "adapter", base=base_spec)
    return folder
