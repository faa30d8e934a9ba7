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

from mleforge.train.grpo.trainer import (  # noqa: E402
    chunk_bounds,
    compact_head_native,
    completion_logps,
    shared_prompts,
)
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


def assert_grads_close(got, want):
    """Each gradient within 1e-5 of its tensor's largest entry (sums in another order)."""
    assert set(got) == set(want) and len(got) > 4
    for name in want:
        scale = float(want[name].abs().max())
        torch.testing.assert_close(got[name], want[name], rtol=1e-3, atol=1e-5 * scale)


def lora_grads(model):
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad and p.grad is not None}


def both_paths(model, ids, mask, keep, batch_size):
    """The fused head's (log-probabilities, entropies, LoRA gradients of their sum), then
    completion_logps' with its aux output and the decoder positions it ran."""
    model.zero_grad()
    want_lp, want_ent = fused(model, ids, mask, keep)
    (want_lp.sum() + want_ent.sum()).backward()
    want = (want_lp, want_ent, lora_grads(model))
    model.zero_grad()
    counter = PositionCounter(model)
    try:
        got_lp, got_ent, aux = completion_logps(model, ids, mask, keep, batch_size=batch_size, compute_entropy=True,
                                                temperature=TEMPERATURE, entropy_requires_grad=True)
    finally:
        counter.handle.remove()
    (got_lp.sum() + got_ent.sum()).backward()
    return want, (got_lp, got_ent, lora_grads(model)), aux, counter.positions


def test_completion_logps_equal_the_fused_heads_values_and_gradients(model):
    ids, mask, keep = batch()
    (want_lp, want_ent, want_grads), (got_lp, got_ent, got_grads), aux, positions = both_paths(model, ids, mask,
                                                                                              keep, 2)
    assert positions == 3 * 12  # three different prompts: nothing shared
    assert aux is None and got_lp.shape == want_lp.shape == (3, keep)
    torch.testing.assert_close(got_lp, want_lp, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(got_ent, want_ent, rtol=1e-4, atol=1e-5)
    # padding scores 0, as the fused head gives it
    assert got_lp[0, 3:].abs().max() == 0 and got_lp[2, 1:].abs().max() == 0 and got_ent[2, 1:].abs().max() == 0
    assert got_lp[1].ne(0).all() and got_lp.lt(0).sum() == 5 + 3 + 1
    assert set(got_grads) == set(want_grads) and len(got_grads) > 4
    for name in want_grads:
        torch.testing.assert_close(got_grads[name], want_grads[name], rtol=1e-3, atol=1e-6)


def group_batch():
    """5 rows as TRL lays out a micro-batch of two GRPO groups, shuffled: rows 0, 2 and 3 one prompt,
    rows 1 and 4 another (left-padded by two), prompts 7 tokens, completions right-padded to 5."""
    g = torch.Generator().manual_seed(5)
    prompt_a, prompt_b = torch.randint(3, 300, (7,), generator=g), torch.randint(3, 300, (7,), generator=g)
    prompt_b[:2] = 0
    ids = torch.cat([torch.stack([prompt_a, prompt_b, prompt_a, prompt_a, prompt_b]),
                     torch.randint(3, 300, (5, 5), generator=g)], dim=1)
    mask = torch.ones_like(ids)
    mask[[1, 4], :2] = 0
    mask[0, 10:] = 0      # completions of 3, 5, 1, 5 and 4 tokens
    mask[2, 8:] = 0
    mask[4, 11:] = 0
    return ids.masked_fill(mask == 0, 0), mask, 5


class PositionCounter:
    """Counts the positions the model's decoder layers run (a forward hook on the first), in all and
    as `counts` with a graph and without."""

    def __init__(self, model):
        self.counts = {"graph": 0, "no_graph": 0}
        self.handle = model.base_model.model.model.layers[0].register_forward_hook(self)

    @property
    def positions(self):
        return self.counts["graph"] + self.counts["no_graph"]

    def __call__(self, module, args, output):
        hidden = args[0] if args else output[0]
        self.counts["graph" if torch.is_grad_enabled() else "no_graph"] += hidden.shape[0] * hidden.shape[1]


def test_rows_sharing_a_prompt_are_found_by_tokens_and_mask():
    ids, mask, keep = group_batch()
    first, inverse = shared_prompts(ids, mask, keep)
    assert sorted(first.tolist()) == [0, 1]
    assert inverse[[0, 2, 3]].unique().numel() == 1 and inverse[[1, 4]].unique().numel() == 1
    assert first[inverse].tolist() == [0, 1, 0, 0, 1]  # each row maps to the first row of its prompt
    # the same tokens under another mask are another prompt; distinct prompts share nothing
    other = mask.clone()
    other[3, 0] = 0
    assert sorted(shared_prompts(ids, other, keep)[0].tolist()) == [0, 1, 3]
    assert shared_prompts(*batch()) is None
    assert shared_prompts(ids[:1], mask[:1], keep) is None  # one row
    assert shared_prompts(ids, mask, ids.size(1)) is None  # no prompt positions


def test_a_shared_prompt_runs_once_with_the_full_forwards_values_and_gradients(model):
    ids, mask, keep = group_batch()
    (want_lp, want_ent, want_grads), (got_lp, got_ent, got_grads), _, positions = both_paths(model, ids, mask,
                                                                                            keep, 5)
    # two prompts of 7 once each, then five completions of 5: 14 + 25 positions against 5 x 12
    assert positions == 2 * 7 + 5 * 5
    torch.testing.assert_close(got_lp, want_lp, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(got_ent, want_ent, rtol=1e-4, atol=1e-5)
    assert got_lp.lt(0).sum() == 3 + 5 + 1 + 5 + 4 and got_lp[2, 1:].abs().max() == 0
    assert set(got_grads) == set(want_grads) and len(got_grads) > 4
    for name in want_grads:  # summed in another order: within 1e-5 of each tensor's largest entry
        scale = float(want_grads[name].abs().max())
        torch.testing.assert_close(got_grads[name], want_grads[name], rtol=1e-3, atol=1e-5 * scale)


def test_sharing_can_be_turned_off_and_is_skipped_under_gradient_checkpointing(model):
    ids, mask, keep = group_batch()

    def positions(**kwargs):
        counter = PositionCounter(model)
        try:
            with torch.no_grad():
                lp, _, _ = completion_logps(model, ids, mask, keep, batch_size=5, compute_entropy=False,
                                            temperature=TEMPERATURE, entropy_requires_grad=False, **kwargs)
        finally:
            counter.handle.remove()
        return counter.positions, lp

    shared, lp_shared = positions()
    whole, lp_whole = positions(share_prompts=False)
    assert (shared, whole) == (39, 60)
    torch.testing.assert_close(lp_shared, lp_whole, rtol=1e-4, atol=1e-5)
    base = model.base_model.model
    if hasattr(base, "activation_checkpointing_enable"):  # transformers 5.x's name
        base.activation_checkpointing_enable({"use_reentrant": False})
        off = base.activation_checkpointing_disable
    else:
        base.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        off = base.gradient_checkpointing_disable
    try:
        assert positions()[0] == 60
    finally:
        off()


@pytest.mark.parametrize(("groups", "chunk", "bounds"), [
    ([2, 3], 3, [0, 2, 5]),            # each group its own call
    ([2, 3], 5, [0, 5]),               # both fit in one
    ([1, 1, 1, 2], 3, [0, 3, 5]),      # packed while they fit
    ([4, 4], 3, [0, 3, 4, 7, 8]),      # a group larger than a call is split, never mixed
    ([1, 7, 1], 4, [0, 1, 5, 9]),       # a split group's rest packs with the next
    ([4, 4], 4, [0, 4, 8]),
])
def test_chunk_bounds_cut_between_groups_where_they_fit(groups, chunk, bounds):
    assert chunk_bounds(groups, chunk) == bounds


def test_chunks_keep_a_prompts_rows_together_and_give_the_rows_order_back(model, monkeypatch):
    import mleforge.train.grpo.trainer as trainer

    ids, mask, keep = group_batch()
    with torch.no_grad():
        whole, _, _ = completion_logps(model, ids, mask, keep, batch_size=5, compute_entropy=False,
                                       temperature=TEMPERATURE, entropy_requires_grad=False, share_prompts=False)
        vocab = model.get_output_embeddings().weight.size(0)
        monkeypatch.setattr(trainer, "MAX_LOGITS", 3 * (keep + 1) * vocab)  # three sequences a call
        counter = PositionCounter(model)
        try:
            split, _, _ = completion_logps(model, ids, mask, keep, batch_size=5, compute_entropy=False,
                                           temperature=TEMPERATURE, entropy_requires_grad=False)
        finally:
            counter.handle.remove()
    # one call a prompt (rows 1, 4; rows 0, 2, 3): 2 x 7 + 5 x 5
    assert counter.positions == 2 * 7 + 5 * 5
    torch.testing.assert_close(split, whole, rtol=1e-4, atol=1e-5)


def test_a_large_chunk_is_split_and_entropy_can_be_left_out(model, monkeypatch):
    import mleforge.train.grpo.trainer as trainer

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

    from tests.benchmark_module import assert_convention, load_benchmark

    out = tmp_path / "lm_head.json"
    bench = load_benchmark("lm_head")
    assert bench.main(["--tiny", "--prompt-tokens", "40", "--completion-tokens", "6", "--repeats", "2",
                       "--lora-rank", "4", "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    assert set(data["seconds"]) == {"trl_fused", "completion_only"}
    assert_convention(data, "lm_head")
    assert [row[0] for row in data["table"]["rows"]] == ["trl_fused", "completion_only"]
    assert [row[1] for row in data["table"]["rows"]] == [round(data["median_s"][k], 3) for k in data["seconds"]]
    assert all(len(v) == 2 and min(v) > 0 for v in data["seconds"].values())
    assert data["trl_scores_completion_only_here"] is False and data["speedup"] > 0
    assert data["max_abs_logp_diff"] < 1e-4
    # a group: one sequence at a time against the shared prompt
    assert bench.main(["--tiny", "--group", "3", "--prompt-tokens", "40", "--completion-tokens", "6", "--repeats", "1",
                       "--lora-rank", "4", "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    assert set(data["seconds"]) == {"completion_only", "shared_prompt"} and data["baseline"] == "completion_only"
    assert data["max_abs_logp_diff"] < 1e-4 and data["speedup"] > 0
    # the group's prompt with a graph against without one: the same values
    assert bench.main(["--tiny", "--group", "3", "--prompt-grad-off", "--prompt-tokens", "40", "--completion-tokens",
                       "6", "--repeats", "1", "--lora-rank", "4", "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    assert set(data["seconds"]) == {"shared_prompt", "prompt_no_grad"} and data["baseline"] == "shared_prompt"
    assert data["max_abs_logp_diff"] < 1e-4 and data["speedup"] > 0


def test_a_steps_micro_batches_are_re_split_one_prompt_each():
    from mleforge.train.grpo.trainer import regroup_by_prompt

    a, b = torch.tensor([0, 5, 6]), torch.tensor([7, 8, 9])
    ones = torch.ones(3, dtype=torch.long)

    def rows(*names):
        prompts = {"a": a, "b": b}
        return {
            "prompt_ids": torch.stack([prompts[n[0]] for n in names]),
            "prompt_mask": torch.stack([ones for _ in names]),
            "completion_ids": torch.tensor([[int(n[1])] for n in names]),
            "advantages": torch.tensor([float(n[1]) for n in names]),
            "texts": list(names),
            "num_items_in_batch": torch.tensor(8),
            "pixel_values": None,
        }

    # TRL's shuffle put the two groups' rows across both micro-batches
    batches = [rows("a1", "b1"), rows("b2", "a2")]
    got = regroup_by_prompt(batches)
    assert [g["texts"] for g in got] == [["a1", "a2"], ["b1", "b2"]]
    assert got[0]["completion_ids"].tolist() == [[1], [2]] and got[1]["advantages"].tolist() == [1.0, 2.0]
    assert all(g["num_items_in_batch"].item() == 8 and g["pixel_values"] is None for g in got)
    assert all(g["prompt_ids"].unique(dim=0).size(0) == 1 for g in got)
    # what it cannot reorder, it leaves alone
    assert regroup_by_prompt(batches[:1]) is None
    odd = [dict(batches[0], extra=3), dict(batches[1], extra=3)]
    assert regroup_by_prompt(odd) is None


class DetachedKeysValues:
    """An independent reference for prompt_grad off: the full forward, with the outputs of every
    attention layer's key and value projections cut off from the graph at positions before
    `cut`. A prompt position reaches the later ones only through its keys and values, so this is
    the gradient that running those positions without a graph gives."""

    def __init__(self, model, cut):
        self.cut = cut
        self.handles = [module.register_forward_hook(self) for name, module in model.named_modules()
                        if name.endswith(("k_proj", "v_proj")) and hasattr(module, "base_layer")]
        assert len(self.handles) == 2 * len(model.base_model.model.model.layers)

    def __call__(self, module, args, output):
        return torch.cat([output[:, :self.cut].detach(), output[:, self.cut:]], dim=1)

    def remove(self):
        for handle in self.handles:
            handle.remove()


def detached_paths(model, ids, mask, keep, share_prompts=True):
    """(full forward: log-probabilities, LoRA gradients), (the reference with keys and values cut
    before the prompt's last position), (completion_logps with prompt_grad off), and the decoder
    positions the last ran with a graph and without."""
    model.zero_grad()
    full, _ = fused(model, ids, mask, keep)
    full.sum().backward()
    full_grads = lora_grads(model)
    model.zero_grad()
    reference = DetachedKeysValues(model, ids.size(1) - keep - 1)
    try:
        want, _ = fused(model, ids, mask, keep)
    finally:
        reference.remove()
    want.sum().backward()
    want_grads = lora_grads(model)
    model.zero_grad()
    counter = PositionCounter(model)
    try:
        got, _, _ = completion_logps(model, ids, mask, keep, batch_size=ids.size(0), compute_entropy=False,
                                     temperature=TEMPERATURE, entropy_requires_grad=False,
                                     share_prompts=share_prompts, prompt_grad=False)
    finally:
        counter.handle.remove()
    got.sum().backward()
    return (full, full_grads), (want, want_grads), (got, lora_grads(model)), counter.counts


@pytest.mark.parametrize("layout", ["groups", "distinct"])
def test_prompt_grad_off_keeps_the_values_and_drops_only_the_prompts_key_value_path(model, layout):
    ids, mask, keep = group_batch() if layout == "groups" else batch()
    (full, full_grads), (want, want_grads), (got, got_grads), counts = detached_paths(model, ids, mask, keep)
    if layout == "groups":  # two prompts' first 6 positions once without a graph, then 5 x (1 + 5)
        assert counts == {"no_graph": 2 * 6, "graph": 5 * 6}
    else:  # three prompts of their own: 3 x 6 without, 3 x 6 with
        assert counts == {"no_graph": 3 * 6, "graph": 3 * 6}
    torch.testing.assert_close(got, full, rtol=1e-4, atol=1e-5)
    assert_grads_close(got_grads, want_grads)
    # and it is another gradient than the full one: the key and value adapters lose the prompt's part
    differs = [n for n in full_grads if not torch.allclose(full_grads[n], want_grads[n], rtol=1e-3, atol=1e-6)]
    assert any("k_proj" in n for n in differs) and any("v_proj" in n for n in differs)


def test_prompt_grad_off_runs_each_row_alone_without_sharing(model):
    ids, mask, keep = group_batch()
    _, (want, want_grads), (got, got_grads), counts = detached_paths(model, ids, mask, keep, share_prompts=False)
    assert counts == {"no_graph": 5 * 6, "graph": 5 * 6}
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    assert_grads_close(got_grads, want_grads)


def test_prompt_grad_off_falls_back_to_the_full_forward_where_it_cannot_cut(model):
    ids, mask, keep = batch()
    # a one-token prompt leaves nothing to run without a graph
    counter = PositionCounter(model)
    try:
        completion_logps(model, ids[:, 6:], mask[:, 6:], keep, batch_size=3, compute_entropy=False,
                         temperature=TEMPERATURE, entropy_requires_grad=False, prompt_grad=False)
        assert counter.counts == {"no_graph": 0, "graph": 3 * 6}
        # a row whose prompt before its last token is padding only
        padded = mask.clone()
        padded[0, :6] = 0
        counter.counts.update(graph=0, no_graph=0)
        completion_logps(model, ids, padded, keep, batch_size=3, compute_entropy=False,
                         temperature=TEMPERATURE, entropy_requires_grad=False, prompt_grad=False)
        assert counter.counts == {"no_graph": 0, "graph": 3 * 12}
    finally:
        counter.handle.remove()
