"""The GRPO trainer's completion log-probabilities on a device without Triton: the vocabulary
projection on the completion positions only, equal to TRL's fused head (which scores every
position there), values and gradients, with padding on both sides."""

from __future__ import annotations

import pytest

pytest.importorskip("trl")

import torch  # noqa: E402
from peft import LoraConfig, get_peft_model  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402
from trl.trainer.utils import add_fused_lm_head  # noqa: E402

from mleforge.train.trainer import compact_head_native, completion_logps  # noqa: E402
from tests.policies.tiny_model import build_tiny_model  # noqa: E402

TEMPERATURE = 0.8


@pytest.fixture(scope="module", params=["llama", "qwen2"])
def model(request, tmp_path_factory):
    folder = build_tiny_model(tmp_path_factory.mktemp(request.param) / "m", architecture=request.param)
    torch.manual_seed(0)
    base = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    add_fused_lm_head(base, temperature=TEMPERATURE, outputs=("log_probs", "entropy"))  # as GRPOTrainer does
    peft = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", init_lora_weights=False))
    return peft


def batch():
    """3 rows: prompts left-padded to 7 tokens, completions right-padded to 5 (TRL's layout)."""
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(3, 300, (3, 12), generator=g)
    mask = torch.ones_like(ids)
    mask[1, :2] = 0       # a shorter prompt
    mask[2, :1] = 0
    mask[0, 10:] = 0      # shorter completions
    mask[2, 8:] = 0
    return ids.masked_fill(mask == 0, 0), mask, 5


def fused(model, ids, mask, keep):
    """TRL 1.16's own computation (GRPOTrainer._get_per_token_logps_and_entropies' body)."""
    labels = ids.masked_fill(mask == 0, -100)
    labels[:, :-keep] = -100
    out = model(input_ids=ids, attention_mask=mask, labels=labels, fused_lm_head=True)
    return out.log_probs[:, -keep:], out.entropy[:, -keep:]


def lora_grads(model):
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad and p.grad is not None}


def test_completion_logps_equal_the_fused_heads_values_and_gradients(model):
    ids, mask, keep = batch()
    model.zero_grad()
    want_lp, want_ent = fused(model, ids, mask, keep)
    (want_lp.sum() + want_ent.sum()).backward()
    want_grads = lora_grads(model)
    model.zero_grad()
    got_lp, got_ent, aux = completion_logps(model, ids, mask, keep, batch_size=2, compute_entropy=True,
                                            temperature=TEMPERATURE, entropy_requires_grad=True)
    (got_lp.sum() + got_ent.sum()).backward()
    got_grads = lora_grads(model)
    assert aux is None and got_lp.shape == want_lp.shape == (3, keep)
    torch.testing.assert_close(got_lp, want_lp, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(got_ent, want_ent, rtol=1e-4, atol=1e-5)
    # padding scores 0, as the fused head gives it
    assert got_lp[0, 3:].abs().max() == 0 and got_lp[2, 1:].abs().max() == 0 and got_ent[2, 1:].abs().max() == 0
    assert got_lp[1].ne(0).all() and got_lp.lt(0).sum() == 5 + 3 + 1
    assert set(got_grads) == set(want_grads) and len(got_grads) > 4
    for name in want_grads:
        torch.testing.assert_close(got_grads[name], want_grads[name], rtol=1e-3, atol=1e-6)


def test_a_large_chunk_is_split_and_entropy_can_be_left_out(model, monkeypatch):
    import mleforge.train.trainer as trainer

    ids, mask, keep = batch()
    with torch.no_grad():
        whole, _, _ = completion_logps(model, ids, mask, keep, batch_size=3, compute_entropy=False,
                                       temperature=TEMPERATURE, entropy_requires_grad=False)
        vocab = model.get_output_embeddings().weight.size(0)
        monkeypatch.setattr(trainer, "MAX_LOGITS", (keep + 1) * vocab)  # one sequence a call
        split, entropy, _ = completion_logps(model, ids, mask, keep, batch_size=3, compute_entropy=False,
                                             temperature=TEMPERATURE, entropy_requires_grad=False)
    assert entropy is None
    torch.testing.assert_close(split, whole, rtol=1e-5, atol=1e-6)


def test_the_cpu_takes_the_completion_only_path():
    assert compact_head_native(torch.device("cpu")) is False


def test_the_lm_head_benchmark_times_both_paths_on_a_tiny_model(tmp_path):
    import json

    from tests.benchmark_module import load_benchmark

    out = tmp_path / "lm_head.json"
    bench = load_benchmark("lm_head")
    assert bench.main(["--tiny", "--prompt-tokens", "40", "--completion-tokens", "6", "--repeats", "2",
                       "--lora-rank", "4", "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    assert set(data["seconds"]) == {"trl_fused", "completion_only"}
    assert all(len(v) == 2 and min(v) > 0 for v in data["seconds"].values())
    assert data["trl_scores_completion_only_here"] is False and data["speedup"] > 0
    assert data["max_abs_logp_diff"] < 1e-4
