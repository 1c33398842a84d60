"""Inference GEMMs on CPU through oneDNN with pre-packed weights (speed only; not in the paper).

Measured on the project's benchmark CPU (AMD EPYC with AVX-512, one thread): torch's default fp32
`F.linear` reaches ~100 GFLOP/s on decoding shapes ([256 x 256] @ [256 x 1024]), oneDNN with the
weight reordered once into its blocked layout ~230 GFLOP/s. Beam search is GEMM-bound (about half of
its time), so `prepack_linears_(module)` routes every `nn.Linear` of a module through that path, but
only for float32 tensors on CPU with autograd not recording (eval, inference_mode or no_grad) and the
module in eval mode; anything else takes the plain `F.linear`. The packed copy is rebuilt when the
weight changes (its version counter moves). Results equal `F.linear`'s up to float rounding (another
summation order).
"""
import torch
import torch.nn.functional as F
from torch import Tensor, nn


def packing_available() -> bool:
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")


class _PackedLinearForward:
    """Replaces one nn.Linear instance's forward (its parameters and state_dict stay as they are)."""

    def __init__(self, linear: nn.Linear):
        self.linear = linear
        self.packed, self.key = None, None

    def __call__(self, x: Tensor) -> Tensor:
        lin = self.linear
        w = lin.weight
        if (lin.training or x.device.type != "cpu" or x.dtype != torch.float32 or w.dtype != torch.float32
                or (torch.is_grad_enabled() and (x.requires_grad or w.requires_grad))):
            return F.linear(x, w, lin.bias)
        key = (w.data_ptr(), w._version)
        if key != self.key:
            self.packed, self.key = torch.ops.mkldnn._reorder_linear_weight(w.detach()), key
        return torch.ops.mkldnn._linear_pointwise(x, self.packed, lin.bias, "none", [], "")


def prepack_linears_(module: nn.Module) -> nn.Module:
    """Give every nn.Linear inside `module` the packed CPU inference path (no-op without oneDNN)."""
    if packing_available():
        for sub in module.modules():
            if isinstance(sub, nn.Linear) and not isinstance(sub.forward, _PackedLinearForward):
                sub.forward = _PackedLinearForward(sub)
    return module
