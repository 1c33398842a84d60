"""Layer normalization (§3.1) whose backward keeps its output instead of its input (memory only;
the maths is `F.layer_norm`'s).

`F.layer_norm` keeps its input x [N, d] for the backward. In the residual blocks of §3.1 that input
is x + Dropout(Sublayer(x)), which nothing else keeps, while the output y is kept anyway by the next
sub-layer's first linear layer. The backward only needs x̂ = (x - mean) * rstd, and y = γ x̂ + β gives
it back: x̂ = y / γ - β / γ. So `layer_norm` keeps y (the next linear layer's copy: no new memory)
and rstd [N, 1]. At the big shape, 4,096 tokens, that is 30 fewer [4096 x 1024] float32 activations
per training step: 480 MB of its ~3.2 GB.

The departure: the gradients use x̂ recovered from y, which differs from the kernel's own x̂ by
rounding, about ulp(y) / |γ|; tests/test_layer_norm.py holds the gradients as close to float64
LayerNorm as torch's own float32 kernel is (within twice its error). A γ with an entry below
`SMALLEST_GAIN` in magnitude would amplify that rounding, so such a layer takes `F.layer_norm`. So
do tensors that are not float32 on CPU (in half precision y's own rounding is 2^-8), and calls that
autograd does not record.
"""
import torch
import torch.nn.functional as F
from torch import Tensor, nn

SMALLEST_GAIN = 1e-2  # |γ| below this anywhere: keep the input (F.layer_norm)


class _LayerNormKeepingOutput(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, eps):
        y, _mean, rstd = torch.native_layer_norm(x, (x.size(-1),), weight, bias, eps)  # y: [*, d]; rstd: [*, 1]
        ctx.save_for_backward(y, rstd, weight, bias)
        return y

    @staticmethod
    def backward(ctx, grad):
        y, rstd, weight, bias = ctx.saved_tensors
        d = y.size(-1)
        x_hat = torch.addcmul(-bias / weight, y, weight.reciprocal())  # [*, d]: y / γ - β / γ
        # The native backward given x̂ as its input, mean 0 and rstd 1 computes every term of the
        # gradient but the last factor rstd of dx: dx = rstd (γg - mean(γg) - x̂ mean(γg x̂)).
        grad_x, grad_w, grad_b = torch.ops.aten.native_layer_norm_backward(
            grad.contiguous(), x_hat, (d,), torch.zeros_like(rstd), torch.ones_like(rstd), weight, bias,
            [ctx.needs_input_grad[0], ctx.needs_input_grad[1], ctx.needs_input_grad[2]])
        return (None if grad_x is None else grad_x.mul_(rstd)), grad_w, grad_b, None


def layer_norm(x: Tensor, norm: nn.LayerNorm) -> Tensor:
    """norm(x), keeping its output rather than its input for the backward (module docstring). `norm`
    normalizes the last dimension with a gain and a bias, as the residual blocks' `nn.LayerNorm(d)` does."""
    if (torch.is_grad_enabled() and x.requires_grad and x.device.type == "cpu" and x.dtype == torch.float32
            and bool(norm.weight.detach().abs().min() >= SMALLEST_GAIN)):
        return _LayerNormKeepingOutput.apply(x, norm.weight, norm.bias, norm.eps)
    return F.layer_norm(x, norm.normalized_shape, norm.weight, norm.bias, norm.eps)  # norm(x), without Module.__call__
