"""Dropout (§5.4) with cheaper masks on CPU (speed only; the maths is `F.dropout`'s).

On CPU, `F.dropout` draws one float per element (`bernoulli_`): 10-13 ms for one [4096 x 512]
activation on the project's machines, 30x the cost of adding two such tensors, and the base model
draws 32 of them per training step (about 5% of the step). Here a mask costs one 32-bit draw per
two elements: each draw gives two 16-bit halves, whose low 15 bits are uniform (torch's
`random_()` on int32 leaves the top bit 0), and an element is kept when its 15 bits are at least
round(p * 2^15). That drops each element independently with probability p' = round(p * 2^15) / 2^15
(|p' - p| <= 2^-16; 0.1 -> 0.100006); kept elements are scaled by 1 / (1 - p'), so the expected
output is still the input. That rounding of p is the one departure from `F.dropout`
(tests/test_dropout.py pins it). The mask is kept as one byte per element for the backward, as
`F.dropout`'s is, and comes from torch's default generator, so fairseq's `--seed` still fixes it.

- `dropout(x, p, training)`: `F.dropout(x, p, training)`;
- `dropout_add(residual, x, p, training)`: `residual + F.dropout(x, p, training)` in one autograd
  node, the residual connections of §5.4.
Other devices (CUDA's dropout is one fused kernel) and a p that rounds to 0 or 1 take `F.dropout`.
"""
import torch
import torch.nn.functional as F
from torch import Tensor

_BITS = 15  # uniform bits per 16-bit half of a draw
# Elements drawn at a time: the draws stay small (512 KB) and are reused, where one draw of a whole
# [4096 x 1024] mask made an 8 MB temporary beside the 4 MB mask, and those mixed sizes left holes in
# glibc's heap (big shape: the training step's peak RSS 300 MB lower, the same masks).
_CHUNK = 1 << 18


def drop_threshold(p: float) -> int:
    """An element is dropped when its 15 random bits are below this: round(p * 2^15)."""
    return round(p * 2 ** _BITS)


def keep_mask(shape, p: float) -> Tensor:
    """bool [*shape]: True with probability 1 - drop_threshold(p) / 2^15, independently per element."""
    numel, threshold = torch.Size(shape).numel(), drop_threshold(p)
    keep = torch.empty(numel, dtype=torch.bool)
    draws = torch.empty((min(numel, _CHUNK) + 1) // 2, dtype=torch.int32)  # reused for every chunk
    for start in range(0, numel, _CHUNK):
        n = min(_CHUNK, numel - start)
        halves = draws[:(n + 1) // 2].random_().view(torch.int16)[:n]  # [n]: 31 random bits per pair
        # the draws continue the generator's stream: the same mask as one draw of ceil(numel / 2)
        torch.ge(halves.bitwise_and_(2 ** _BITS - 1), threshold, out=keep[start:start + n])
    return keep.view(shape)


def _fast(x: Tensor, p: float) -> bool:
    """The cheaper mask (while training): on CPU, for a p that does not round to 0 or to 1 (which keeps nothing)."""
    return x.device.type == "cpu" and 0 < drop_threshold(p) < 2 ** _BITS


class _MaskedScale(torch.autograd.Function):
    """y = residual + x * keep / (1 - p'); residual may be None."""

    @staticmethod
    def forward(ctx, residual, x, p):
        keep = keep_mask(x.shape, p)
        scale = 1.0 / (1.0 - drop_threshold(p) / 2 ** _BITS)
        ctx.save_for_backward(keep)
        ctx.scale, ctx.has_residual = scale, residual is not None
        kept = torch.mul(x, keep.view(torch.uint8))  # [*], zeros where dropped (a uint8 factor: the fast kernel)
        return kept.mul_(scale) if residual is None else torch.add(residual, kept, alpha=scale, out=kept)

    @staticmethod
    def backward(ctx, grad):
        (keep,) = ctx.saved_tensors
        grad_x = torch.mul(grad, keep.view(torch.uint8)).mul_(ctx.scale) if ctx.needs_input_grad[1] else None
        return (grad if ctx.has_residual else None), grad_x, None


def dropout(x: Tensor, p: float, training: bool) -> Tensor:
    """F.dropout(x, p, training), with the cheaper CPU mask of the module docstring."""
    if not training:  # the identity, without a call per sub-layer per decoding step
        return x
    if not _fast(x, p):
        return F.dropout(x, p=p, training=True)
    return _MaskedScale.apply(None, x, p)


def dropout_add(residual: Tensor, x: Tensor, p: float, training: bool) -> Tensor:
    """residual + F.dropout(x, p, training): one autograd node, the mask of the module docstring."""
    if not training:
        return residual + x
    if not _fast(x, p):
        return residual + F.dropout(x, p=p, training=True)
    return _MaskedScale.apply(residual, x, p)
