"""Linear layers bound once for a decoding loop (speed only; not in the paper).

The lean beam search calls 19 linear products a step, each on a few rows. `onednn_linear.linear`
decides at every call which backend takes a product (float32 on CPU? autograd recording? packed?
how many rows?), and those checks cost about as much as a product of a few rows. Here they are
made once per search, for layers whose weights stay put while it runs:
- `decoding_product(layer)`: a layer as a function of x [N, k];
- `bound_linear(weight, bias, packed, fallback)`: the same for a weight without a layer of its own
  (the decoder's output projection), optionally writing every result into one buffer;
- `kernel_panels(layer)`: the few-row kernel's panels of a layer's weight, for the decoder layers
  that run whole in C (`decoding_kernels`).
The products are `onednn_linear`'s, with its rules (`kernel_rows`, `no_grad_product`): the results
are the same as calling the layer.
"""
from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor, nn
from torch.nn.modules.module import _global_forward_hooks, _global_forward_pre_hooks  # read by every Module call

from . import few_rows_linear, onednn_linear
from .onednn_linear import OneDNNLinear, PackedWeight


def decoding_product(layer: nn.Module) -> Callable[[Tensor], Tensor]:
    """`layer` (a linear layer) as a function of x [N, k] for a loop that calls it many times without
    autograd (the lean beam search's step: 19 calls a step). `linear`'s per-call checks, which cost
    about as much as a product of a few rows, are made here once: a packed float32 CPU
    `OneDNNLinear` becomes `onednn_linear.no_grad_product` on its weight. Any other layer is its
    own `forward`, and one that a forward hook would see (its own, or one set for every module)
    stays the module: hooks registered later are seen from the next call of this function on. The
    few-row kernel's panels and torch's thread count are read here too
    (`few_rows_linear.bound_product`): a weight changed in place, or a new thread count, is seen
    from the next call of this function on."""
    if _hooked(layer):
        return layer
    if not isinstance(layer, OneDNNLinear):
        return layer.forward
    return bound_linear(layer.weight, layer.bias, layer.packed, layer.forward)


def bound_linear(weight: Tensor, bias: Tensor | None, packed: PackedWeight | None,
                 fallback: Callable[[Tensor], Tensor], reuse_output: bool = False) -> Callable[[Tensor], Tensor]:
    """`decoding_product`'s binding for a weight (the decoder's output projection has no layer of its
    own): x2 -> `onednn_linear.linear(x2, weight, bias, packed)`, or `fallback(x2)` where the
    weight is not packed, float32 on CPU. `reuse_output`: for a loop done with one call's result
    before the next (the lean beam search's logits, `decoding_step.BeamDecodingStep`), the few-row
    kernel writes every result into one buffer (the result views it, valid until the next call)
    instead of a new block each call: [rows, V] is a step's largest, and as sentences finish its
    size changes, so a new one was mapped and faulted in again and again."""
    if packed is None or not onednn_linear.cpu_fp32(weight):
        return fallback
    # The kernel's panels, bound once for the calls that take it (a search's weights stay put).
    panels = _panels(weight, packed)  # None where the kernel is not built
    kernel = None if panels is None else few_rows_linear.bound_product(panels, bias, weight.size(0))
    buffer = None  # reuse_output's

    def product(x2: Tensor) -> Tensor:
        nonlocal buffer
        # onednn_linear's flag read, not `onednn_available()` called: 19 products a step
        if onednn_linear._AVAILABLE and x2.dtype == torch.float32 and not torch.is_grad_enabled():
            if kernel is not None and onednn_linear.kernel_rows(x2.size(0)):
                if not reuse_output:
                    return kernel(x2)
                if buffer is None or buffer.numel() < x2.size(0) * weight.size(0):
                    buffer = x2.new_empty(x2.size(0) * weight.size(0))
                return kernel(x2, buffer)
            try:
                return onednn_linear.no_grad_product(x2, weight, bias, packed)
            except onednn_linear.Unusable:
                pass
        return fallback(x2)

    return product


def _hooked(layer: nn.Module) -> bool:
    return bool(layer._forward_hooks or layer._forward_pre_hooks or _global_forward_hooks
                or _global_forward_pre_hooks)


def kernel_panels(layer: nn.Module) -> Tensor | None:
    """The few-row kernel's panels of `layer`'s weight where `decoding_product` binds the kernel for
    it (a packed float32 CPU `OneDNNLinear` without hooks, the kernel built), else None."""
    if _hooked(layer) or not isinstance(layer, OneDNNLinear):
        return None
    return _panels(layer.weight, layer.packed)


def _panels(weight: Tensor, packed: PackedWeight | None) -> Tensor | None:
    """The few-row kernel's panels of a packed float32 CPU weight where the kernel is built, else None."""
    if packed is None or not onednn_linear.cpu_fp32(weight):
        return None
    if not few_rows_linear.supports(weight.dtype, weight.size(1)):
        return None
    return packed.panels(weight)
