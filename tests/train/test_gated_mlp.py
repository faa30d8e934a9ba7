"""mleforge.train.grpo.gated_mlp: a gated SiLU MLP keeps its gate and up projections, not their
SiLU, for the backward pass; the same values and gradients as the MLP run as written."""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")

import torch  # noqa: E402
from transformers import Qwen2Config  # noqa: E402
from transformers.models.qwen2.modeling_qwen2 import Qwen2MLP  # noqa: E402

from mleforge.train.grpo.gated_mlp import gated_mlps, lean_gated_mlp, silu_times  # noqa: E402


def test_the_gradients_are_torchs_own():
    g = torch.Generator().manual_seed(0)
    gate = (torch.randn(3, 5, 7, generator=g) * 4).requires_grad_()  # large values: both tails of the SiLU
    up = torch.randn(3, 5, 7, generator=g).requires_grad_()
    weight = torch.randn(3, 5, 7, generator=g)
    (torch.nn.functional.silu(gate) * up * weight).sum().backward()
    want = (gate.grad.clone(), up.grad.clone())
    gate.grad = up.grad = None
    out = silu_times(gate, up)
    assert out.grad_fn is not None and type(out.grad_fn).__name__ == "_SiluTimesBackward"
    torch.testing.assert_close(out, torch.nn.functional.silu(gate) * up, rtol=0, atol=0)
    (out * weight).sum().backward()
    torch.testing.assert_close(gate.grad, want[0], rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(up.grad, want[1], rtol=0, atol=0)


def test_an_input_without_a_gradient_gets_none():
    gate = torch.randn(4, 6)  # a frozen gate projection
    up = torch.randn(4, 6).requires_grad_()
    silu_times(gate, up).sum().backward()
    torch.testing.assert_close(up.grad, torch.nn.functional.silu(gate), rtol=0, atol=0)
    assert gate.grad is None


def test_other_types_and_no_graph_run_as_written():
    gate, up = torch.randn(2, 3, dtype=torch.bfloat16).requires_grad_(), torch.randn(2, 3, dtype=torch.bfloat16)
    assert type(silu_times(gate, up).grad_fn).__name__ == "MulBackward0"  # bfloat16: torch's own SiLU
    with torch.no_grad():
        assert silu_times(torch.randn(2, 3), torch.randn(2, 3)).grad_fn is None


def mlp():
    config = Qwen2Config(hidden_size=8, intermediate_size=24, hidden_act="silu")
    torch.manual_seed(1)
    return Qwen2MLP(config)


def saved_activations(module, x):
    """The distinct [.., intermediate] tensors autograd keeps for the backward pass of module(x)."""
    storages = set()

    def pack(t):
        if t.size(-1) == 24 and t.dim() == 3:
            storages.add(t.untyped_storage().data_ptr())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = module(x)
    return out, len(storages)


def test_inside_the_block_the_mlp_keeps_one_activation_fewer_and_gives_the_same_values():
    module = mlp()
    x = torch.randn(2, 5, 8).requires_grad_()
    want, kept = saved_activations(module, x)
    assert kept == 3  # the gate's output, its SiLU, the up projection
    want.square().sum().backward()
    want_grads = {n: p.grad.clone() for n, p in module.named_parameters()} | {"x": x.grad.clone()}
    module.zero_grad()
    x.grad = None
    with lean_gated_mlp(module):
        got, kept = saved_activations(module, x)
    assert kept == 2  # the gate's output and the up projection
    assert "forward" not in vars(module)  # restored: the class's own forward again
    got.square().sum().backward()  # the graph built inside backpropagates after the block
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    got_grads = {n: p.grad for n, p in module.named_parameters()} | {"x": x.grad}
    for name, grad in want_grads.items():
        torch.testing.assert_close(got_grads[name], grad, rtol=1e-6, atol=1e-7)


def test_only_named_mlps_with_a_silu_are_changed_and_blocks_nest():
    silu, gelu = mlp(), Qwen2MLP(Qwen2Config(hidden_size=8, intermediate_size=24, hidden_act="gelu"))
    model = torch.nn.ModuleList([silu, gelu])
    assert gated_mlps(model) == [silu]
    with lean_gated_mlp(model):
        assert "forward" in vars(silu) and "forward" not in vars(gelu)
        inner = silu.forward
        with lean_gated_mlp(model):
            assert silu.forward == inner
        assert "forward" in vars(silu)  # the inner block changed nothing, so restores nothing
    assert "forward" not in vars(silu)
