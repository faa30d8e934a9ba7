"""A checkpoint records which conversion of its bundled base it was trained on, and neither an
adapter nor a resumed run goes on on another (the Qwen's embeddings were tied at 175384c)."""

from __future__ import annotations

import json

import pytest

from mleforge.policies.base import PolicyError
from mleforge.policies.bundled import conversion_id
from mleforge.policies.model_source import read_marker, resolve_model, write_marker

QWEN = "qwen2.5-coder-0.5b"


def adapter_folder(tmp_path, marker: dict | None = None):
    folder = tmp_path / "ckpt"
    folder.mkdir()
    (folder / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA"}))
    write_marker(folder, weights="adapter", base=f"bundled:{QWEN}")
    if marker is not None:
        (folder / "mleforge_model.json").write_text(json.dumps(marker))
    return folder


def test_a_checkpoint_on_a_bundled_base_records_its_conversion(tmp_path):
    folder = adapter_folder(tmp_path)
    assert read_marker(folder)["base_weights"] == conversion_id(QWEN) == {
        "gguf_sha256": "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        "embeddings": "tied to the output layer"}
    write_marker(folder, weights="adapter", base=f"hf:{tmp_path}")
    assert "base_weights" not in read_marker(folder)  # a folder's weights are what they are


def test_an_adapter_from_before_the_tie_is_refused(tmp_path):
    marker = {"format": "mleforge-checkpoint", "version": 1, "weights": "adapter", "base": f"bundled:{QWEN}"}
    folder = adapter_folder(tmp_path, marker)  # as mleforge wrote it before: no base_weights
    with pytest.raises(PolicyError, match=r"trained on bundled:qwen2.5-coder-0.5b converted with embeddings as "
                                          r"the GGUF has them \(untied\).*tied to the output layer.*Train it again"):
        resolve_model(f"hf:{folder}", convert=False)


def test_an_adapter_on_the_same_conversion_resolves_past_the_check(tmp_path):
    folder = adapter_folder(tmp_path)
    try:
        source = resolve_model(f"hf:{folder}", convert=False)
    except PolicyError as exc:  # the bundled packages not installed: named, and past the check
        assert "trained on" not in str(exc)
    else:
        assert source.adapters == (str(folder),)


def test_a_run_started_on_the_untied_conversion_is_not_resumed_on_the_tied_one(tmp_path):
    from mleforge.train.config import TrainConfig
    from mleforge.train.errors import TrainError
    from mleforge.train.recipe import _check_base_weights

    config = TrainConfig.preset_config("cpu", model={"spec": f"bundled:{QWEN}"})
    _check_base_weights(tmp_path, config)  # no run.json: a run that never started
    (tmp_path / "run.json").write_text(json.dumps({"kind": "train", "status": "running"}))
    with pytest.raises(TrainError, match="started on bundled:qwen2.5-coder-0.5b converted with embeddings as the "
                                         "GGUF has them.*Finish the run with the mleforge version it started with"):
        _check_base_weights(tmp_path, config)
    (tmp_path / "run.json").write_text(json.dumps({"kind": "train", "base_weights": conversion_id(QWEN)}))
    _check_base_weights(tmp_path, config)
    other = config.replace(model={"spec": "hf:/some/folder"})
    (tmp_path / "run.json").write_text(json.dumps({"kind": "train"}))
    _check_base_weights(tmp_path, other)  # not a bundled model: its folder is its weights
