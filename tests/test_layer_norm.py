"""modules/layer_norm.py: a LayerNorm whose backward keeps its output, not its input. Checked against
torch's own LayerNorm in float64 (values and the three gradients), against what autograd keeps
(saved tensors hooks), and its one departure (x̂ recovered from the output, so gradients equal the
kernel's only to rounding) and its fallbacks pinned."""
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from vaswani_plugin.modules.layer_norm import SMALLEST_GAIN, layer_norm


def _norm(d, gain_low=0.5, seed=0):
    torch.manual_seed(seed)
    norm = nn.LayerNorm(d)
    with torch.no_grad():
        norm.weight.uniform_(gain_low, 1.5).mul_(torch.randint(0, 2, (d,)) * 2 - 1)  # either sign
        norm.bias.normal_()
    return norm


def _grads(fn, norm, x, g):
    x = x.detach().requires_grad_()
    norm.zero_grad(set_to_none=True)
    y = fn(x)
    y.backward(g.to(y.dtype))
    return [t.double() for t in (y.detach(), x.grad, norm.weight.grad, norm.bias.grad)]


def _float64_reference(norm, x, g):
    """torch's LayerNorm kernel in float64, the same weights."""
    w, b = norm.weight.detach().double().requires_grad_(), norm.bias.detach().double().requires_grad_()
    x = x.detach().double().requires_grad_()
    y = F.layer_norm(x, (x.size(-1),), w, b, norm.eps)
    y.backward(g.double())
    return [y.detach(), x.grad, w.grad, b.grad]


@pytest.mark.parametrize("shape", [(64, 32, 512), (7, 3, 96), (5, 1024)])
def test_values_and_gradients_equal_layer_norm_in_float64(shape):
    norm = _norm(shape[-1])
    x = torch.randn(shape) * 3 + 1
    g = torch.randn(shape)
    ours = _grads(lambda t: layer_norm(t, norm), norm, x, g)
    torchs = _grads(norm, norm, x, g)
    reference = _float64_reference(norm, x, g)
    for name, o, t, r in zip(("y", "dx", "dgamma", "dbeta"), ours, torchs, reference):
        scale = r.abs().max().item()
        # the departure: x̂ comes back from y, so ours equals the kernel to rounding, not bit for bit;
        # its error is of the size of float32 LayerNorm's own
        assert (o - r).abs().max().item() <= max(1e-6 * scale, 2 * (t - r).abs().max().item()), name


def _kept_storages(fn):
    """The storages of the tensors autograd keeps for the backward while fn() runs."""
    kept = []

    def pack(t):
        kept.append(t.untyped_storage().data_ptr())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn()
    return kept, out


def _keeps_input(norm, x):
    return x.untyped_storage().data_ptr() in _kept_storages(lambda: layer_norm(x, norm))[0]


def test_keeps_its_output_and_not_its_input():
    norm = _norm(64)
    h = torch.randn(8, 16, 64).requires_grad_() * 2  # an activation of its own, as x + Dropout(Sublayer(x)) is
    kept, y = _kept_storages(lambda: layer_norm(h, norm))
    assert y.untyped_storage().data_ptr() in kept
    assert h.untyped_storage().data_ptr() not in kept
    kept, _ = _kept_storages(lambda: norm(h))  # torch's LayerNorm keeps the input: what this saves
    assert h.untyped_storage().data_ptr() in kept


def test_a_gain_near_zero_keeps_the_input():
    """y / γ would amplify y's rounding: any |γ| < SMALLEST_GAIN takes torch's LayerNorm."""
    norm = _norm(32)
    x = torch.randn(4, 32).mul(2).requires_grad_()
    h = x * 1
    assert not _keeps_input(norm, h)
    with torch.no_grad():
        norm.weight[5] = SMALLEST_GAIN / 2
    assert _keeps_input(norm, h)
    g = torch.randn(4, 32)
    for o, r in zip(_grads(lambda t: layer_norm(t, norm), norm, x, g)[1:], _grads(norm, norm, x, g)[1:]):
        assert torch.equal(o, r)  # the same kernel: bit for bit


def test_other_dtypes_and_no_grad_take_torchs_layer_norm():
    norm = _norm(32).to(torch.bfloat16)
    x = torch.randn(4, 32, dtype=torch.bfloat16).requires_grad_()
    assert _keeps_input(norm, x * 1)
    norm = _norm(32)
    with torch.no_grad():
        x = torch.randn(4, 32)
        assert torch.equal(layer_norm(x, norm), norm(x))
