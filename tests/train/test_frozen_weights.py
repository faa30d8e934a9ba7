"""Frozen weights on a file (mleforge.train.model.file_backed): a checkpoint's merged weights,
written to <run>/frozen-weights, memory-mapped, deleted at once, and bit for bit the weights
merged in memory; what a GRPO rollout then drops while the engine generates. A tiny random
Llama, a real adapter checkpoint, a real full disk (RLIMIT_FSIZE) and a real tmpfs."""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap
from pathlib import Path

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
    scratch = run / "frozen-weights"
    leftover = scratch / "model.safetensors"  # what a process killed while writing left
    scratch.mkdir(parents=True)
    leftover.write_bytes(b"half a file")
    in_memory = load_for_training(ModelConfig(spec=f"hf:{checkpoint}")).model
    mapped = load_for_training(ModelConfig(spec=f"hf:{checkpoint}"), scratch=scratch).model
    assert list(run.iterdir()) == []  # written, mapped, deleted: nothing left, not even the folder
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
    """The weights of a plain float32 folder are its own file's already; full training writes
    every weight, so a file would be of no use."""
    scratch = tmp_path / "frozen-weights"
    load_for_training(ModelConfig(spec=f"hf:{tiny}"), scratch=scratch)
    load_for_training(ModelConfig(spec=f"hf:{checkpoint}", full=True), scratch=scratch)
    assert not scratch.exists()


@linux
def test_weights_cast_on_load_are_written_and_mapped_too(tiny, tmp_path):
    """A bfloat16 folder trained in float32: the cast weights are the process's own memory, so
    they go on a file like merged ones."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    half = tmp_path / "bf16"
    AutoModelForCausalLM.from_pretrained(tiny, dtype=torch.bfloat16).save_pretrained(half)
    AutoTokenizer.from_pretrained(tiny).save_pretrained(half)
    scratch = tmp_path / "run" / "frozen-weights"
    model = load_for_training(ModelConfig(spec=f"hf:{half}"), scratch=scratch).model
    assert next(model.parameters()).dtype == torch.float32
    assert mapping_of(next(model.parameters())).path == f"{scratch / 'model.safetensors'} (deleted)"


# A checkpoint loaded with its weights to be written where the file may grow to LIMIT bytes:
# the write fails as on a full disk (EFBIG, inside safetensors' own writer).
FULL_DISK = textwrap.dedent("""
    import logging, resource, signal, sys
    from pathlib import Path
    from mleforge.train.config import ModelConfig
    from mleforge.train.model import load_for_training
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails instead of killing
    resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[3]), resource.RLIM_INFINITY))
    loaded = load_for_training(ModelConfig(spec="hf:" + sys.argv[1]), scratch=Path(sys.argv[2]))
    print(float(sum(p.double().sum() for p in loaded.model.parameters())))
""")


@linux
def test_a_full_disk_keeps_the_weights_in_memory_and_says_so(tiny, checkpoint, tmp_path):
    expected = float(sum(p.double().sum() for p in load_for_training(ModelConfig(spec=f"hf:{checkpoint}")).model.parameters()))
    limit = (Path(tiny) / "model.safetensors").stat().st_size // 2  # config.json fits, the weights do not
    scratch = tmp_path / "run" / "frozen-weights"
    done = subprocess.run([sys.executable, "-c", FULL_DISK, str(checkpoint), str(scratch), str(limit)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "could not be written" in done.stderr and "stay in memory" in done.stderr
    assert float(done.stdout.split()[-1]) == expected
    assert not scratch.exists()  # the half-written file went


@linux
def test_a_tmpfs_scratch_is_not_used(checkpoint, caplog):
    """A file in tmpfs is memory that no kernel reclaims without swap: no saving, so no file."""
    from mleforge.utils.memory import filesystem_type

    if filesystem_type("/dev/shm") != "tmpfs":
        pytest.skip("no tmpfs at /dev/shm")
    scratch = Path("/dev/shm") / f"mleforge-test-{__import__('os').getpid()}" / "frozen-weights"
    with caplog.at_level(logging.INFO, logger="mleforge.train.model"):
        model = load_for_training(ModelConfig(spec=f"hf:{checkpoint}"), scratch=scratch).model
    assert "is on tmpfs" in caplog.text and not scratch.parent.exists()
    assert mapping_of(next(model.parameters())).anonymous > 0  # merged in memory, as without scratch


def test_a_scratch_that_cannot_be_written_keeps_the_weights_in_memory_and_says_so(checkpoint, tmp_path, caplog):
    blocker = tmp_path / "run"
    blocker.write_text("a file where the folder should be")
    expected = dict(load_for_training(ModelConfig(spec=f"hf:{checkpoint}")).model.named_parameters())
    with caplog.at_level(logging.WARNING, logger="mleforge.train.model"):
        loaded = load_for_training(ModelConfig(spec=f"hf:{checkpoint}"), scratch=blocker / "frozen-weights")
    if sys.platform.startswith("linux"):
        assert "could not be written" in caplog.text and "stay in memory" in caplog.text
    assert all(torch.equal(p, expected[n]) for n, p in loaded.model.named_parameters())
    assert blocker.read_text() == "a file where the folder should be"


@linux
@pytest.mark.skipif(__import__("importlib").util.find_spec("ctranslate2") is None, reason="needs mleforge[fast]")
def test_a_grpo_run_from_a_checkpoint_drops_its_mapped_weights_while_generating(tiny, checkpoint, titanic, journals,
                                                                                 tmp_path, registry, monkeypatch):
    """`mleforge train` from an adapter checkpoint, one step on ct2 rollouts: the rollout finds
    the frozen weights mapped from <run>/frozen-weights (deleted) and drops them; the run
    leaves no such folder."""
    import mleforge.train.grpo.ct2_rollout as ct2_rollout
    from mleforge.train.recipe import train
    from tests.train.engines import short_prompt
    from tests.train.test_ct2_rollout import ct2_config

    seen = []
    release = ct2_rollout.release_file_pages

    def recorded(tensors):
        tensors = list(tensors)
        seen.append((mapping_of(tensors[0]).path, release(tensors)))
        return seen[-1][1]

    monkeypatch.setattr(ct2_rollout, "release_file_pages", recorded)
    run = tmp_path / "run"
    config = ct2_config(tiny, journals, model=ModelConfig(spec=f"hf:{checkpoint}", gradient_checkpointing=False),
                        steps=1)
    train(config, run, registry=registry, progress=False, renderer=short_prompt)
    assert len(seen) == 1
    path, released = seen[0]
    assert path == f"{run / 'frozen-weights' / 'model.safetensors'} (deleted)" and released > 0
    assert not (run / "frozen-weights").exists() and (run / "final" / "adapter_config.json").is_file()
