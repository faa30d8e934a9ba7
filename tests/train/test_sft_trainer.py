"""The SFT trainer's loss on a device without Triton: the fused LM head on the completion
positions only, equal to TRL's own path (which projects every position there): the loss,
the LoRA gradients and the logged metrics, on a right-padded batch of unequal samples."""

from __future__ import annotations

import pytest

pytest.importorskip("trl")

import torch  # noqa: E402
import trl  # noqa: E402
from datasets import Dataset  # noqa: E402
from peft import LoraConfig  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

import mleforge.train.sft_trainer as sft_trainer  # noqa: E402
from mleforge.train.sft_trainer import CompletionSFTTrainer  # noqa: E402
from tests.policies.tiny_model import build_tiny_model  # noqa: E402

ROWS = [  # unequal prompts and completions: right padding, and counted labels from different columns
    ("Write a plan for the titanic task, then the code.", "Plan: a forest.\n```python\nprint(1)\n```"),
    ("Fix the bug.", "```python\nimport pandas as pd\nprint('fixed the bug in the script')\n```"),
    ("Improve the script by tuning the model's depth and the number of trees.", "Use depth 6."),
]


@pytest.fixture(scope="module", params=["llama", "qwen2"])
def folder(request, tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp(request.param) / "m", architecture=request.param)


def make_trainer(folder, out):
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    data = Dataset.from_list([{"prompt": [{"role": "user", "content": p}],
                               "completion": [{"role": "assistant", "content": c}]} for p, c in ROWS])
    args = trl.SFTConfig(output_dir=str(out), per_device_train_batch_size=len(ROWS), max_length=None,
                         completion_only_loss=True, report_to="none", disable_tqdm=True, use_cpu=True,
                         bf16=False, seed=0, dataset_num_proc=None)
    peft = LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", init_lora_weights=False)
    return CompletionSFTTrainer(model=model, args=args, train_dataset=data, processing_class=tokenizer,
                                peft_config=peft)


def loss_grads_metrics(trainer, inputs, spy):
    trainer.model.zero_grad(set_to_none=True)
    trainer._metrics["train"].clear()
    trainer._total_train_tokens = 0  # num_tokens is a running total
    spy.clear()
    loss = trainer.compute_loss(trainer.model, dict(inputs), num_items_in_batch=None)
    loss.backward()
    grads = {n: p.grad.clone() for n, p in trainer.model.named_parameters() if p.grad is not None}
    metrics = {k: list(v) for k, v in trainer._metrics["train"].items()}
    return loss.detach(), grads, metrics, list(spy)


def test_the_completion_only_loss_equals_trls_every_position_loss(folder, tmp_path, monkeypatch):
    trainer = make_trainer(folder, tmp_path / "out")
    trainer.model.train()
    inputs = trainer._prepare_inputs(next(iter(trainer.get_train_dataloader())))
    labels = inputs["labels"]
    assert labels.size(0) == 3 and (labels[:, -1] == -100).any()  # right padding on a shorter row
    backbone = trainer._cut_backbone(inputs)
    assert backbone is not None

    import trl.trainer.utils as trl_utils

    projected: list[int] = []
    original = trl_utils._ChunkedLogProbFunction.apply

    def counting(hidden, *args):
        projected.append(hidden.size(0))
        return original(hidden, *args)

    monkeypatch.setattr(trl_utils._ChunkedLogProbFunction, "apply", counting)
    ours = loss_grads_metrics(trainer, inputs, projected)
    monkeypatch.setattr(sft_trainer, "compact_head_native", lambda device: True)  # TRL's path as it is
    theirs = loss_grads_metrics(trainer, inputs, projected)

    rows, length = labels.shape
    shifted = labels[:, 1:]
    first = int((shifted != -100).any(dim=0).nonzero()[0])
    assert first > 0
    assert theirs[3] == [rows * (length - 1)]          # every position, on a CPU
    assert ours[3] == [rows * (length - 1 - first)]    # from the first counted column on
    torch.testing.assert_close(ours[0], theirs[0], rtol=1e-5, atol=1e-6)
    assert ours[1].keys() == theirs[1].keys() and len(ours[1]) > 0
    for name in ours[1]:
        torch.testing.assert_close(ours[1][name], theirs[1][name], rtol=1e-4, atol=1e-6)
    assert ours[2].keys() == theirs[2].keys() >= {"entropy", "mean_token_accuracy", "num_tokens"}
    for key in ours[2]:
        assert ours[2][key] == pytest.approx(theirs[2][key], rel=1e-5)
    assert not backbone._forward_hooks  # the cut was for that call only


def test_the_cut_leaves_trls_path_where_it_does_not_apply(folder, tmp_path):
    trainer = make_trainer(folder, tmp_path / "out")
    inputs = trainer._prepare_inputs(next(iter(trainer.get_train_dataloader())))
    assert trainer._cut_backbone(inputs) is not None
    assert trainer._cut_backbone({k: v for k, v in inputs.items() if k != "labels"}) is None
    assert trainer._cut_backbone({**inputs, "shift_labels": inputs["labels"][:, 1:]}) is None
    trainer.label_smoother = object()
    assert trainer._cut_backbone(inputs) is None


def test_the_lm_head_benchmark_times_the_sft_step_both_ways_on_a_tiny_model(tmp_path):
    import json

    from tests.benchmark_module import assert_convention, load_benchmark

    out = tmp_path / "lm_head-sft.json"
    bench = load_benchmark("lm_head")
    assert bench.main(["--objective", "sft", "--tiny", "--prompt-tokens", "40", "--completion-tokens", "6",
                       "--repeats", "2", "--lora-rank", "4", "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["objective"] == "sft" and set(data["seconds"]) == {"trl_fused", "completion_only"}
    assert_convention(data, "lm_head")
    assert [row[0] for row in data["table"]["rows"]] == ["trl_fused", "completion_only"]
    assert [row[1] for row in data["table"]["rows"]] == [round(data["median_s"][k], 3) for k in data["seconds"]]
    assert all(len(v) == 2 and min(v) > 0 for v in data["seconds"].values())
    assert data["max_abs_loss_diff"] < 1e-4 and data["speedup"] > 0
    assert bench.main(["--objective", "sft", "--tiny", "--prompt-grad-off", "--prompt-tokens", "40",
                       "--completion-tokens", "6", "--repeats", "1", "--lora-rank", "4", "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    assert set(data["seconds"]) == {"completion_only", "prompt_no_grad"} and data["max_abs_loss_diff"] < 1e-5


def test_prompt_grad_off_runs_the_shared_prompt_columns_without_a_graph(folder, tmp_path, monkeypatch):
    from tests.train.test_trainer_logps import (
        DetachedKeysValues,
        PositionCounter,
        assert_grads_close,
    )

    trainer = make_trainer(folder, tmp_path / "out")
    trainer.model.train()
    inputs = trainer._prepare_inputs(next(iter(trainer.get_train_dataloader())))
    labels = inputs["labels"]
    rows, length = labels.shape
    first = int((labels[:, 1:] != -100).any(dim=0).nonzero()[0])
    backbone = trainer._cut_backbone(inputs)

    exact = loss_grads_metrics(trainer, inputs, [])
    # the reference: TRL's own path, with every key and value before column `first` cut off the graph
    monkeypatch.setattr(sft_trainer, "compact_head_native", lambda device: True)
    reference = DetachedKeysValues(trainer.model, first)
    try:
        want = loss_grads_metrics(trainer, inputs, [])
    finally:
        reference.remove()
    monkeypatch.undo()

    trainer.prompt_grad = False
    counter = PositionCounter(trainer.model)
    try:
        got = loss_grads_metrics(trainer, inputs, [])
    finally:
        counter.handle.remove()
    assert counter.counts == {"no_graph": rows * first, "graph": rows * (length - first)}
    torch.testing.assert_close(got[0], exact[0], rtol=1e-5, atol=1e-6)  # the same loss
    torch.testing.assert_close(got[0], want[0], rtol=1e-5, atol=1e-6)
    assert_grads_close(got[1], want[1])
    for key in got[2]:
        assert got[2][key] == pytest.approx(exact[2][key], rel=1e-5)
    differs = [n for n in exact[1] if not torch.allclose(exact[1][n], want[1][n], rtol=1e-3, atol=1e-6)]
    assert any("k_proj" in n for n in differs) and any("v_proj" in n for n in differs)
    assert not backbone._forward_hooks and not backbone._forward_pre_hooks
