"""`mleforge train`'s preflight on a fresh machine: a bundled model not yet assembled or
converted is checked from its catalog entry, and nothing is converted before the run starts."""

from __future__ import annotations

import os
from dataclasses import replace

import pytest

from mleforge.policies.bundled import BUNDLED, bundled_at, get_bundled, package_dir
from mleforge.policies.model_source import resolve_model
from mleforge.tasks.registry import TaskRegistry
from mleforge.train.config import ModelConfig, TrainConfig
from mleforge.train.preflight import ct2_architecture_problem, preflight

pytest.importorskip("trl")


def installed(name: str) -> bool:
    return all(package_dir(part.module) is not None for part in get_bundled(name).parts)


def test_bundled_at_names_the_model_whose_cache_folder_it_is(tmp_path, monkeypatch):
    monkeypatch.setenv("MLEFORGE_MODELS", str(tmp_path))
    assert bundled_at(tmp_path / "smollm2-135m" / "hf") is BUNDLED["smollm2-135m"]
    assert bundled_at(tmp_path / "qwen2.5-coder-0.5b" / "hf") is BUNDLED["qwen2.5-coder-0.5b"]
    assert bundled_at(tmp_path / "smollm2-135m" / "other") is None
    assert bundled_at(tmp_path / "no-such-model" / "hf") is None
    assert bundled_at(tmp_path / "elsewhere" / "smollm2-135m" / "hf") is None
    assert all(model.config_class for model in BUNDLED.values())


@pytest.mark.parametrize("name", sorted(BUNDLED))
def test_ct2_check_of_an_unconverted_bundled_model_reads_its_catalog_entry(name, tmp_path, monkeypatch):
    pytest.importorskip("ctranslate2")
    if not installed(name):
        pytest.skip(f"bundled model {name} is not installed")
    monkeypatch.setenv("MLEFORGE_MODELS", str(tmp_path))  # an empty cache: a fresh machine
    source = resolve_model(f"bundled:{name}", convert=False)
    assert ct2_architecture_problem(source, f"bundled:{name}") is None  # both architectures convert
    monkeypatch.setitem(BUNDLED, name, replace(BUNDLED[name], config_class="NoSuchConfig"))
    assert ct2_architecture_problem(source, f"bundled:{name}") == (
        f"CTranslate2 cannot convert NoSuchConfig models (bundled:{name})")
    assert not any(tmp_path.iterdir())  # nothing assembled, nothing converted


def test_preflight_on_a_fresh_cache_takes_ct2_and_converts_nothing(tmp_path, monkeypatch):
    pytest.importorskip("ctranslate2")
    if not installed("smollm2-135m"):
        pytest.skip("bundled model smollm2-135m is not installed")
    monkeypatch.setenv("MLEFORGE_MODELS", str(tmp_path))
    config = TrainConfig(model=ModelConfig(spec="bundled:smollm2-135m", device="cpu"))
    plan = preflight(config, TaskRegistry())
    assert plan.config.generation.backend == "ct2"
    assert not any(tmp_path.iterdir())


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(BUNDLED))
def test_the_catalog_names_the_config_class_the_conversion_gives(name):
    pytest.importorskip("gguf")
    if name != "smollm2-135m" and os.environ.get("MLEFORGE_SKIP_QWEN") == "1":
        pytest.skip("MLEFORGE_SKIP_QWEN=1")
    if not installed(name):
        pytest.skip(f"bundled model {name} is not installed")
    from transformers import AutoConfig

    from mleforge.policies.bundled import prepare_bundled

    folder = prepare_bundled(name)  # the real cache: converted once per machine
    assert type(AutoConfig.from_pretrained(folder, local_files_only=True)).__name__ == BUNDLED[name].config_class
