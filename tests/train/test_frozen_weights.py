"""Frozen weights on a file (mleforge.train.model.file_backed): a checkpoint's merged weights,
written to <run>/frozen-weights/rank-<i>, memory-mapped, deleted at once, and bit for bit the
weights merged in memory; what a GRPO rollout then drops while the engine generates. A tiny
random Llama and a real adapter checkpoint."""

from __future__ import annotations

import logging
import sys

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("trl")

import peft  # noqa: E402

from mleforge.train.config import ModelConfig  # noqa: E402
from mleforge.train.model import load_for_training, save_trained  # noqa: E402
from mleforge.utils.memory import file_mappings, release_file_pages  # noqa: E402

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/smaps and madvise are Linux's")


@pytest.fixture(scope="module")
def checkpoint(tiny, tmp_path_factory):
    """An adapter checkpoint on the tiny model whose LoRA is not zero (merging it changes every
    adapted weight)."""
    loaded = load_for_training(ModelConfig(spec=f"hf:{tiny}"))
    model = peft.get_peft_model(loaded.model, loaded.peft_config)
    torch.manual_seed(0)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.05)
    folder = tmp_path_factory.mktemp("ckpt") / "adapter"
    return save_trained(model, loaded.tokenizer, folder, full=False, base_spec=f"hf:{tiny}")


def mapping_of(tensor):
    pointer = tensor.untyped_storage().data_ptr()
    return next((m for m in file_mappings() if m.start <= pointer < m.end), None)


def logits(model):
    with torch.no_grad():
        return model(input_ids=torch.tensor([[1, 5, 9, 13, 2]])).logits


@linux
def test_merged_weights_are_mapped_from_a_deleted_file_and_equal_the_merge_in_memory(tiny, checkpoint, tmp_path):
    run = tmp_path / "run"
    scratch = run / "frozen-weights" / "rank-0"
    leftover = scratch / "model.safetensors"  # what a process killed while writing left
    scratch.mkdir(parents=True)
    leftover.write_bytes(b"half a file")
    in_memory = load_for_training(ModelConfig(spec=f"hf:{checkpoint}")).model
    mapped = load_for_training(ModelConfig(spec=f"hf:{checkpoint}"), scratch=scratch).model
    assert list(run.iterdir()) == []  # written, mapped, deleted: nothing left, not even the folders
    expected = dict(in_memory.named_parameters())
    for name, param in mapped.named_parameters():
        assert torch.equal(param, expected[name]), name
        where = mapping_of(param)
        assert where is not None and where.path == f"{scratch / 'model.safetensors'} (deleted)", name
    # Merged in memory, the adapted weights are private copies of pages of the base's mapping:
    # dropping that mapping would undo the merge, so nothing of it is dropped.
    assert mapping_of(next(in_memory.parameters())).anonymous > 0
    assert release_file_pages(in_memory.parameters()) == 0
    before = logits(mapped)
    assert torch.equal(before, logits(in_memory))
    assert release_file_pages(mapped.parameters()) > 0
    assert mapping_of(next(mapped.parameters())).rss == 0
    assert torch.equal(logits(mapped), before)  # read back from the page cache, bit for bit
    assert mapped.config._name_or_path == in_memory.config._name_or_path == str(tiny)
    assert mapped.name_or_path == in_memory.name_or_path == str(tiny)  # PEFT's base_model_name_or_path


def test_a_plain_folder_and_a_full_run_write_nothing(tiny, checkpoint, tmp_path):
    """The weights of a plain folder are its own file's already; full training writes every
    weight, so a file would be of no use."""
    scratch = tmp_path / "frozen-weights" / "rank-0"
    load_for_training(ModelConfig(spec=f"hf:{tiny}"), scratch=scratch)
    load_for_training(ModelConfig(spec=f"hf:{checkpoint}", full=True), scratch=scratch)
    assert not (tmp_path / "frozen-weights").exists()


def test_a_scratch_that_cannot_be_written_keeps_the_weights_in_memory_and_says_so(checkpoint, tmp_path, caplog):
    blocker = tmp_path / "frozen-weights"
    blocker.write_text("a file where the folder should be")
    expected = dict(load_for_training(ModelConfig(spec=f"hf:{checkpoint}")).model.named_parameters())
    with caplog.at_level(logging.WARNING, logger="mleforge.train.model"):
        loaded = load_for_training(ModelConfig(spec=f"hf:{checkpoint}"), scratch=blocker / "rank-0")
    assert "could not be written" in caplog.text and "stay in memory" in caplog.text
    assert all(torch.equal(p, expected[n]) for n, p in loaded.model.named_parameters())
    assert blocker.read_text() == "a file where the folder should be"
