"""The GRPO update's lean path on a CPU (mleforge.train.grpo.chunked_head, kv_heads, gated_mlp) against the
full one it replaced: the model's own logits through a log-softmax, keys and values copied out to
every query head. Log-probabilities, entropies and LoRA gradients agree to float precision, on the
tiny learner of tests/train/tiny_model.py (grouped-query attention: 4 query heads on 2)."""

from __future__ import annotations

import pytest

pytest.importorskip("trl")

import torch  # noqa: E402
from peft import LoraConfig, get_peft_model  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402

import mleforge.train.grpo.chunked_head as chunked_head  # noqa: E402
import mleforge.train.grpo.gated_mlp as gated_mlp  # noqa: E402
from mleforge.train.grpo.chunked_head import split_head  # noqa: E402
from mleforge.train.grpo.kv_heads import grouped_kv_on_cpu  # noqa: E402
from mleforge.train.grpo.trainer import completion_logps  # noqa: E402
from tests.train.tiny_model import build_learner  # noqa: E402

TEMPERATURE = 0.8
OLD = {"chunked_head": False, "kv_heads": False, "gated_mlp": False}


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    folder = build_learner(tmp_path_factory.mktemp("learner") / "m", steps=40)
    torch.manual_seed(0)
    base = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    assert base.config.num_attention_heads == 2 * base.config.num_key_value_heads
    return get_peft_model(base, LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", init_lora_weights=False))


def group_batch():
    """A GRPO group as TRL lays it out: 4 rows of one left-padded prompt (9 tokens, 2 of them padding),
    then completions right-padded to 6 (6, 4, 1 and 3 tokens), and the rows' advantages."""
    g = torch.Generator().manual_seed(7)
    prompt = torch.randint(3, 300, (9,), generator=g)
    ids = torch.cat([prompt.expand(4, -1), torch.randint(3, 300, (4, 6), generator=g)], dim=1)
    mask = torch.ones_like(ids)
    mask[:, :2] = 0
    for row, length in enumerate((6, 4, 1, 3)):
        mask[row, 9 + length:] = 0
    return ids.masked_fill(mask == 0, 0), mask, 6, torch.tensor([1.0, -0.5, 0.25, -0.75])


def update(model, ids, mask, keep, advantages, **paths):
    """(log-probabilities, entropies, LoRA gradients) of a policy-gradient loss, as the trainer's update."""
    model.zero_grad()
    logps, entropy, aux = completion_logps(model, ids, mask, keep, batch_size=None, compute_entropy=True,
                                           temperature=TEMPERATURE, entropy_requires_grad=False,
                                           prompt_grad=paths.pop("prompt_grad", True), **paths)
    assert aux is None and not entropy.requires_grad
    (-(logps * advantages[:, None]).sum()).backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad and p.grad is not None}
    return logps.detach(), entropy, grads


def assert_same(got, want):
    (got_lp, got_ent, got_grads), (want_lp, want_ent, want_grads) = got, want
    torch.testing.assert_close(got_lp, want_lp, rtol=0, atol=1e-6)
    torch.testing.assert_close(got_ent, want_ent, rtol=0, atol=2e-6)
    assert set(got_grads) == set(want_grads) and len(want_grads) == 2 * 7 * 2  # A and B of 7 linears, 2 layers
    for name, want in want_grads.items():  # sums in another order: within 5e-6 of each tensor's largest entry
        torch.testing.assert_close(got_grads[name], want, rtol=0, atol=5e-6 * float(want.abs().max()))


@pytest.mark.parametrize("prompt_grad", [True, False])
def test_the_lean_path_equals_the_full_logits_values_and_gradients(model, monkeypatch, prompt_grad):
    from transformers.integrations import sdpa_attention

    copies = []
    repeat_kv = sdpa_attention.repeat_kv
    monkeypatch.setattr(sdpa_attention, "repeat_kv", lambda *a: copies.append(1) or repeat_kv(*a))
    lean_mlps = []
    silu_times = gated_mlp.silu_times
    monkeypatch.setattr(gated_mlp, "silu_times", lambda *a: lean_mlps.append(1) or silu_times(*a))
    ids, mask, keep, advantages = group_batch()
    want = update(model, ids, mask, keep, advantages, prompt_grad=prompt_grad, **OLD)
    assert copies and not lean_mlps  # the full path copies keys and values out to the query heads
    copies.clear()
    monkeypatch.setattr(chunked_head, "TILE_COLUMNS", 100)  # the vocabulary's 384 in four tiles, the last short
    got = update(model, ids, mask, keep, advantages, prompt_grad=prompt_grad)
    assert not copies and lean_mlps  # grouped keys and values; the lean MLP
    assert_same(got, want)
    # padding scores 0 both ways; the kept positions are real log-probabilities
    assert got[0][2, 1:].abs().max() == 0 and got[1][2, 1:].abs().max() == 0 and got[0][0].lt(0).all()
    assert float(want[1][0].min()) > 0.1  # a warm-started model: entropies that differ, not all log(vocab)


def test_without_entropy_the_log_probabilities_are_the_same(model):
    ids, mask, keep, _ = group_batch()
    with torch.no_grad():
        full, _, _ = completion_logps(model, ids, mask, keep, batch_size=None, compute_entropy=True,
                                      temperature=TEMPERATURE, entropy_requires_grad=False, **OLD)
        lean, entropy, _ = completion_logps(model, ids, mask, keep, batch_size=2, compute_entropy=False,
                                            temperature=TEMPERATURE, entropy_requires_grad=False)
    assert entropy is None
    torch.testing.assert_close(lean, full, rtol=0, atol=1e-6)


def test_a_head_the_chunks_cannot_take_runs_the_full_logits(model, monkeypatch):
    decoder, head = split_head(model)
    assert decoder is model.base_model.model.model and head is model.base_model.model.lm_head
    config = model.base_model.model.config
    monkeypatch.setattr(config, "final_logit_softcapping", 30.0, raising=False)  # Gemma's: logits capped
    assert split_head(model) is None
    monkeypatch.setattr(config, "final_logit_softcapping", None)
    monkeypatch.setattr(model.base_model.model, "lm_head", torch.nn.Sequential(head))  # not a plain Linear
    assert split_head(model) is None


def test_keys_and_values_stay_grouped_on_a_cpu_only_inside_the_block(monkeypatch):
    from transformers.integrations import sdpa_attention

    original = sdpa_attention.use_gqa_in_sdpa
    key, mask = torch.zeros(1, 2, 3, 4), torch.zeros(1, 1, 3, 3)
    assert original(mask, key, key) is False  # transformers' own choice with a mask
    with grouped_kv_on_cpu():
        assert sdpa_attention.use_gqa_in_sdpa(mask, key, key) is True
        with grouped_kv_on_cpu():  # nested: unchanged, and restored by the outer block only
            pass
        assert sdpa_attention.use_gqa_in_sdpa is not original
        meta = torch.zeros(1, 2, 3, 4, device="meta")
        assert sdpa_attention.use_gqa_in_sdpa(mask, meta, meta) is original(mask, meta, meta)
    assert sdpa_attention.use_gqa_in_sdpa is original
