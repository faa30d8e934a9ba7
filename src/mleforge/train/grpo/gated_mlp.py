"""A gated MLP's activation kept once during a CPU update.

    with lean_gated_mlp(model):    each gated SiLU MLP of `model` (Llama, Mistral, Qwen2, Qwen3)
        ...                        keeps its gate and up projections for the backward pass, not
                                   also the SiLU of the gate

These models' MLP is down(silu(gate(x)) * up(x)). Run as written, autograd keeps four
[rows, positions, intermediate] tensors a layer for the backward pass: the gate's output (for
the SiLU's gradient), its SiLU and the up projection (for the product's), and the product (for
the down projection's LoRA). The SiLU is a cheap function of the gate, so `silu_times` keeps only
the gate and the up projection and computes the SiLU again in the backward pass, with the same
formula torch's own SiLU gradient uses: the same values, a quarter less of the MLP's activations
(Qwen2.5-0.5B, one group of the cpu preset: 24 layers x [4, 193, 4864] float32, ~344 MiB).

Only float32 CPU tensors take this path (elsewhere the MLP runs as written: a GPU's bfloat16
SiLU gradient is computed in float32 inside torch's kernel, which this would not match), and
only the MLP classes named in GATED_MLPS whose activation is a plain SiLU: their forward is that
one line in every transformers release mleforge supports.
"""

from __future__ import annotations

import types
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

# transformers' MLP classes whose forward is exactly down_proj(act_fn(gate_proj(x)) * up_proj(x)).
GATED_MLPS = frozenset({"LlamaMLP", "MistralMLP", "Qwen2MLP", "Qwen3MLP"})
_SILU = frozenset({"SiLU", "SiLUActivation"})  # torch's and transformers' own
_MARK = "_mleforge_lean_forward"


class _SiluTimes(torch.autograd.Function):
    """silu(gate) * up, keeping gate and up (not the SiLU) for the backward pass."""

    @staticmethod
    def forward(ctx: Any, gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        ctx.save_for_backward(gate, up)
        return torch.nn.functional.silu(gate) * up

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, Any]:  # type: ignore[override]
        gate, up = ctx.saved_tensors
        sigmoid = torch.sigmoid(gate)
        grad_up = grad * torch.nn.functional.silu(gate) if ctx.needs_input_grad[1] else None
        # d silu / d gate = sigmoid * (1 + gate * (1 - sigmoid)), as torch's silu_backward has it
        grad_gate = (grad * up) * (sigmoid * (1 + gate * (1 - sigmoid))) if ctx.needs_input_grad[0] else None
        return grad_gate, grad_up


def silu_times(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """silu(gate) * up; for float32 CPU tensors, without the SiLU kept for the backward pass."""
    if gate.device.type == "cpu" and gate.dtype == torch.float32 and up.dtype == torch.float32 \
            and torch.is_grad_enabled() and (gate.requires_grad or up.requires_grad):
        return _SiluTimes.apply(gate, up)
    return torch.nn.functional.silu(gate) * up


def _lean_forward(self: Any, x: torch.Tensor) -> torch.Tensor:
    return self.down_proj(silu_times(self.gate_proj(x), self.up_proj(x)))


def gated_mlps(model: Any) -> list[Any]:
    """The modules of `model` that `lean_gated_mlp` runs the lean way."""
    return [m for m in model.modules() if type(m).__name__ in GATED_MLPS
            and type(getattr(m, "act_fn", None)).__name__ in _SILU
            and all(hasattr(m, name) for name in ("gate_proj", "up_proj", "down_proj"))]


@contextmanager
def lean_gated_mlp(model: Any) -> Iterator[None]:
    """Within the block, `model`'s gated SiLU MLPs keep the gate and up projections only for the
    backward pass (see the module docstring); a graph built inside is backpropagated the same
    after the block. Blocks nest: the outer one restores."""
    changed = [m for m in gated_mlps(model) if _MARK not in vars(m)]
    for module in changed:
        module.forward = types.MethodType(_lean_forward, module)
        setattr(module, _MARK, True)
    try:
        yield
    finally:
        for module in changed:
            del module.forward
            delattr(module, _MARK)
