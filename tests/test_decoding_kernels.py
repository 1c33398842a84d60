"""The decoding step's C kernels (modules/decoding_kernels.c) against Eq. 1 and LayerNorm computed in
float64 by torch, on the layouts the step hands them: queries inside a projection's output, keys and
values inside caches with spare capacity, masks per query row or shared by a sentence's rows; and
what happens where they cannot be built. The step built on them is held to the modules' full forward
in tests/test_decoding_speedups.py and the search to fairseq's in tests/test_beam_search_parity.py."""
import logging

import pytest
import torch
import torch.nn.functional as F

from vaswani_plugin.modules import decoding_kernels

needs_kernels = pytest.mark.skipif(not decoding_kernels.available(), reason="the decoding kernels need a C compiler")


def _attention_in_float64(q, k, v, bias, scale):
    """Eq. 1 per sentence and head, as the kernel's docstring lays it out, in float64."""
    n, heads, length, d_k = k.shape
    q = q[:, :heads * d_k].double().view(n, -1, heads, d_k).transpose(1, 2)  # [N, H, g, d_k]
    scores = q @ k.double().transpose(-1, -2) * scale  # [N, H, g, S]
    if bias is not None:
        scores = scores + bias.double().view(n, heads, -1, length)
    out = torch.softmax(scores, dim=-1) @ v.double()  # [N, H, g, d_k]
    return out.transpose(1, 2).reshape(q.size(0) * q.size(2), heads * d_k)


@needs_kernels
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("mask", ["none", "per row", "per sentence"])
@pytest.mark.parametrize("n, group, heads, d_k, length", [(1, 1, 4, 64, 1), (3, 4, 4, 64, 37), (2, 8, 2, 20, 9),
                                                        (5, 4, 8, 64, 130)])
def test_grouped_attention_equals_eq1_in_float64(n, group, heads, d_k, length, mask, threads):
    g = torch.Generator().manual_seed(length)
    d = heads * d_k
    qkv = torch.randn(n * group, 3 * d, generator=g)  # the queries are the first d columns of each row
    cache_k, cache_v = (torch.randn(n, heads, length + 7, d_k, generator=g) for _ in range(2))  # spare capacity
    k, v = cache_k[:, :, :length], cache_v[:, :, :length]
    bias = None
    if mask != "none":
        rows = group if mask == "per row" else 1
        hidden = torch.rand(n * heads, rows, length, generator=g) < 0.4
        hidden[..., 0] = False  # every query sees a key
        bias = torch.zeros(hidden.shape).masked_fill_(hidden, float("-inf"))
    scale = d_k ** -0.5
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        out = decoding_kernels.grouped_attention(qkv, k, v, bias, scale)
    finally:
        torch.set_num_threads(before)
    assert out.shape == (n * group, d) and out.dtype == torch.float32
    torch.testing.assert_close(out.double(), _attention_in_float64(qkv, k, v, bias, scale), rtol=1e-5, atol=1e-6)


@needs_kernels
def test_grouped_attention_hides_what_the_mask_hides():
    """A hidden key changes nothing, whatever it holds: with a huge score (key 3), or NaN in its key and
    value (key 1: a cache column not written yet), the output equals attention over the visible keys
    (0 x NaN would be NaN: the kernel passes hidden keys over)."""
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 8, generator=g)
    k, v = torch.randn(1, 1, 5, 8, generator=g), torch.randn(1, 1, 5, 8, generator=g)
    k[0, 0, 3] = q[0] * 100  # key 3 would take all of row 0's weight
    k[0, 0, 1], v[0, 0, 1] = float("nan"), float("nan")
    bias = torch.zeros(1, 2, 5)
    bias[0, :, [1, 3]] = float("-inf")
    out = decoding_kernels.grouped_attention(q, k, v, bias, 1.0)
    visible = [0, 2, 4]
    expected = _attention_in_float64(q, k[:, :, visible], v[:, :, visible], None, 1.0)
    torch.testing.assert_close(out.double(), expected, rtol=1e-5, atol=1e-6)


@needs_kernels
@pytest.mark.parametrize("rows, d", [(1, 256), (4, 256), (33, 512), (7, 10)])
def test_add_layer_norm_equals_layer_norm_of_the_sum_in_float64(rows, d):
    g = torch.Generator().manual_seed(d)
    x, y = torch.randn(rows, d, generator=g) * 3 + 5, torch.randn(rows, d, generator=g)  # a mean far from 0
    norm = torch.nn.LayerNorm(d)
    with torch.no_grad():
        norm.weight.copy_(torch.rand(d, generator=g) + 0.5)
        norm.bias.copy_(torch.randn(d, generator=g))
    expected = F.layer_norm((x + y).double(), (d,), norm.weight.double(), norm.bias.double(), norm.eps)
    out = decoding_kernels.bound_add_layer_norm(norm)(x, y)
    assert out is x  # in place
    torch.testing.assert_close(out.double(), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("compiler, message", [("no-such-compiler-here", "no C compiler 'no-such-compiler-here'"),
                                               ("false", "false -O3")])
def test_kernels_that_cannot_be_built_leave_one_log_line_and_torch_operations(monkeypatch, caplog, compiler, message):
    monkeypatch.setenv("CC", compiler)
    monkeypatch.setattr(decoding_kernels, "_tried", False)
    monkeypatch.setattr(decoding_kernels, "_library", None)
    x = torch.randn(4, 8)
    with caplog.at_level(logging.WARNING, logger=decoding_kernels.__name__):
        assert not any(decoding_kernels.takes(x) for _ in range(3))
    lines = [r.getMessage() for r in caplog.records if r.name == decoding_kernels.__name__]
    assert len(lines) == 1 and message in lines[0] and "stays on torch's operations" in lines[0], lines


@needs_kernels
def test_only_float32_on_cpu_takes_the_kernels():
    assert decoding_kernels.takes(torch.zeros(2, 4))
    assert not decoding_kernels.takes(torch.zeros(2, 4, dtype=torch.bfloat16))
    assert not decoding_kernels.takes(torch.zeros(2, 4, dtype=torch.float64))
