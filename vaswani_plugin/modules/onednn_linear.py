"""fp32 GEMMs on CPU through oneDNN (speed only; not in the paper).

Measured on the project's benchmark CPU (AMD EPYC with AVX-512, one thread): torch's default fp32
matmul (MKL's sgemm) reaches ~90-105 GFLOP/s on the Transformer's shapes, oneDNN's linear primitive
~170-240 GFLOP/s, for training shapes ([4096 x 512] @ [512 x 2048], and both backward products) and
decoding shapes alike; reordering a weight once into oneDNN's blocked layout helps decoding further.

- `matmul_nt(a, b)`: a @ bᵀ, through oneDNN for float32 CPU tensors (the fused output loss uses it);
- `linear(x, weight, bias, packed)`: `F.linear` with, while autograd records, an autograd Function
  whose forward and both backward products go through oneDNN, and otherwise the weight packed once
  (`PackedWeight`, re-packed when the weight changes);
- `use_onednn_linears_(module, pack)` gives every `nn.Linear` inside a module that path, packing
  weights only for a model that decodes from then on.
Anything else (other dtypes, other devices, no oneDNN) takes plain `F.linear`. Results equal
`F.linear`'s up to float rounding (another summation order); parameters and state_dict are untouched.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def onednn_available() -> bool:
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")


_AVAILABLE = onednn_available()


def _cpu_fp32(*tensors: Tensor) -> bool:
    return _AVAILABLE and all(t.device.type == "cpu" and t.dtype == torch.float32 for t in tensors)


def _linear(x2: Tensor, weight: Tensor, bias=None) -> Tensor:
    """[N, k] x [M, k] (+ [M]) -> [N, M] with oneDNN's linear primitive (dense inputs)."""
    return torch.ops.mkldnn._linear_pointwise(x2.contiguous(), weight.contiguous(), bias, "none", [], "")


def matmul_nt(a: Tensor, b: Tensor) -> Tensor:
    """a [N, k] @ b [M, k]ᵀ -> [N, M]; oneDNN for float32 CPU tensors, torch's matmul otherwise."""
    return _linear(a, b) if _cpu_fp32(a, b) else a @ b.t()


def nt_operand(b: Tensor) -> Tensor:
    """`b` laid out for repeated use as `matmul_nt`'s second operand: dense once, where oneDNN would
    otherwise copy a strided `b` on every call."""
    return b.contiguous() if _cpu_fp32(b) else b


class _OneDNNLinear(torch.autograd.Function):
    """y = x Wᵀ + b with dy/dx = g W and dW = gᵀ x, every product through oneDNN."""

    @staticmethod
    def forward(ctx, x, weight, bias):
        x2 = x.reshape(-1, x.size(-1))  # [N, k]
        ctx.save_for_backward(x2, weight)
        ctx.x_shape, ctx.has_bias = x.shape, bias is not None
        return _linear(x2, weight, bias).view(*x.shape[:-1], weight.size(0))  # [..., M]

    @staticmethod
    def backward(ctx, grad):
        x2, weight = ctx.saved_tensors
        g = grad.reshape(-1, grad.size(-1))  # [N, M]
        grad_x = _linear(g, weight.t()).view(ctx.x_shape) if ctx.needs_input_grad[0] else None  # [..., k]
        grad_w = _linear(g.t(), x2.t()) if ctx.needs_input_grad[1] else None  # [M, k]
        grad_b = g.sum(0) if ctx.has_bias and ctx.needs_input_grad[2] else None  # [M]
        return grad_x, grad_w, grad_b


class PackedWeight:
    """oneDNN's blocked copy of one weight for inference, re-made when the weight's data pointer or
    version counter moves (load_state_dict, in-place ops on the parameter; not in-place ops on
    `param.data`, which optimizers use: see `use_onednn_linears_`)."""

    def __init__(self):
        self.packed, self.key = None, None

    def get(self, weight: Tensor) -> Tensor:
        key = (weight.data_ptr(), weight._version)
        if key != self.key:
            self.packed, self.key = torch.ops.mkldnn._reorder_linear_weight(weight.detach()), key
        return self.packed


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None, packed: PackedWeight | None = None) -> Tensor:
    """`F.linear(x, weight, bias)`, through oneDNN for float32 CPU tensors: the autograd Function when
    autograd records, else the `packed` copy of the weight when one is given."""
    if not _cpu_fp32(x, weight):
        return F.linear(x, weight, bias)
    if torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad):
        return _OneDNNLinear.apply(x, weight, bias)
    x2 = x.reshape(-1, x.size(-1)).contiguous()  # [N, k]
    w = weight.contiguous() if packed is None else packed.get(weight)
    out = torch.ops.mkldnn._linear_pointwise(x2, w, bias, "none", [], "")
    return out.view(*x.shape[:-1], weight.size(0))  # [..., M]


class _OneDNNLinearForward:
    """Replaces one nn.Linear instance's forward (its parameters and state_dict stay as they are)."""

    def __init__(self, module: nn.Linear):
        self.linear, self.packed = module, None

    def __call__(self, x: Tensor) -> Tensor:
        return linear(x, self.linear.weight, self.linear.bias, self.packed)


def use_onednn_linears_(module: nn.Module, pack: bool = False) -> nn.Module:
    """Give every nn.Linear inside `module` the oneDNN CPU path (a no-op without oneDNN).

    `pack=True` is for a model that only decodes from now on (fairseq's make_generation_fast_): its
    weights are then packed once. Not while training: optimizers update `param.data` in place, which
    moves neither the data pointer nor the version counter `PackedWeight` watches, so a packed copy
    would go stale between validations."""
    if _AVAILABLE:
        for sub in module.modules():
            if isinstance(sub, nn.Linear):
                if not isinstance(sub.forward, _OneDNNLinearForward):
                    sub.forward = _OneDNNLinearForward(sub)
                if pack and sub.forward.packed is None:
                    sub.forward.packed = PackedWeight()
    return module
