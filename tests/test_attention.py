"""Attention (§3.2) against a plain reference and against fairseq's MultiheadAttention."""
import math

import pytest
import torch
from fairseq.modules import MultiheadAttention

from vaswani_plugin.modules import FusedEncoderDecoderAttention, FusedSelfAttention, scaled_dot_product
from vaswani_plugin.modules import attention_kernels


def reference_attention(q, k, v, key_padding_mask=None, causal=False):
    """softmax(QK^T / sqrt(d_k)) V written out loop by loop from Eq. 1, in float64. `causal`: the t
    queries are the last t of the s positions (a chunk of new steps after s - t cached ones)."""
    q, k, v = q.double(), k.double(), v.double()
    b, h, t, d = q.shape
    s = k.size(2)
    out = torch.zeros(b, h, t, d, dtype=torch.float64)
    for bi in range(b):
        for i in range(t):
            allowed = [j for j in range(s)
                       if not (key_padding_mask is not None and key_padding_mask[bi, j])
                       and not (causal and j > i + s - t)]
            scores = torch.stack([(q[bi, :, i] * k[bi, :, j]).sum(-1) / math.sqrt(d) for j in allowed], -1)
            weights = torch.softmax(scores, dim=-1)  # [H, |allowed|]
            out[bi, :, i] = torch.einsum("ha,had->hd", weights, v[bi][:, allowed])
    return out


def padding_mask(lengths, s):
    return torch.arange(s)[None, :] >= torch.tensor(lengths)[:, None]  # True at padding


CASES = [
    dict(t=5, s=7, mask=None, causal=False),
    dict(t=6, s=6, mask=[6, 3, 1], causal=False),
    dict(t=6, s=6, mask=None, causal=True),
    dict(t=6, s=6, mask=[6, 4, 2], causal=True),
    dict(t=4, s=9, mask=None, causal=True),  # a chunk of 4 new queries against 5 cached steps
    dict(t=3, s=7, mask=[7, 5, 4], causal=True),
]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("need_weights", [False, True])
def test_scaled_dot_product_matches_eq1_fp32(case, need_weights):
    b, h, d = 3, 2, 8
    q = torch.randn(b, h, case["t"], d, requires_grad=True)
    k = torch.randn(b, h, case["s"], d, requires_grad=True)
    v = torch.randn(b, h, case["s"], d, requires_grad=True)
    mask = padding_mask(case["mask"], case["s"]) if case["mask"] else None
    out, weights = scaled_dot_product(q, k, v, mask, case["causal"], need_weights=need_weights)
    ref = reference_attention(q, k, v, mask, case["causal"])
    torch.testing.assert_close(out.double(), ref, atol=1e-5, rtol=1e-5)
    if need_weights:
        assert torch.allclose(weights.sum(-1), torch.ones(()), atol=1e-6)
        if mask is not None:
            assert (weights.masked_select(mask[:, None, None, :].expand_as(weights)) == 0).all()
    # gradients: d(sum(out * g)) against the float64 reference
    g = torch.randn_like(out)
    grads = torch.autograd.grad((out * g).sum(), (q, k, v))
    qd, kd, vd = (x.detach().double().requires_grad_() for x in (q, k, v))
    ref_grads = torch.autograd.grad((reference_attention(qd, kd, vd, mask, case["causal"]) * g.double()).sum(),
                                    (qd, kd, vd))
    for got, want in zip(grads, ref_grads):
        torch.testing.assert_close(got.double(), want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("need_weights", [False, True])
def test_scaled_dot_product_bf16_values_and_gradients_close_to_reference(case, need_weights):
    b, h, d = 2, 2, 16
    q, k, v = (torch.randn(b, h, n, d) for n in (case["t"], case["s"], case["s"]))
    mask = padding_mask(case["mask"][:b], case["s"]) if case["mask"] else None
    q16, k16, v16 = (x.bfloat16().requires_grad_() for x in (q, k, v))
    out, _ = scaled_dot_product(q16, k16, v16, mask, case["causal"], need_weights=need_weights)
    assert out.dtype == torch.bfloat16
    # bf16 keeps 8 mantissa bits: relative error about 2^-8 per rounding, a few roundings deep.
    torch.testing.assert_close(out.double(), reference_attention(q, k, v, mask, case["causal"]),
                               atol=3e-2, rtol=3e-2)
    g = torch.randn_like(out, dtype=torch.float32)
    grads = torch.autograd.grad((out.float() * g).sum(), (q16, k16, v16))
    qd, kd, vd = (x.double().requires_grad_() for x in (q, k, v))
    ref_grads = torch.autograd.grad((reference_attention(qd, kd, vd, mask, case["causal"]) * g.double()).sum(),
                                    (qd, kd, vd))
    for got, want in zip(grads, ref_grads):
        torch.testing.assert_close(got.double(), want, atol=6e-2, rtol=6e-2)


def _fairseq_mha_like(ours, self_attention):
    """A fairseq MultiheadAttention with our weights copied in (its q/k/v are our packed blocks)."""
    e, h = ours.embed_dim, ours.num_heads
    theirs = MultiheadAttention(e, h, self_attention=self_attention, encoder_decoder_attention=not self_attention)
    with torch.no_grad():
        if self_attention:
            wq, wk, wv = ours.qkv_proj.weight.chunk(3)
            bq, bk, bv = ours.qkv_proj.bias.chunk(3)
        else:
            wq, bq = ours.q_proj.weight, ours.q_proj.bias
            wk, wv = ours.kv_proj.weight.chunk(2)
            bk, bv = ours.kv_proj.bias.chunk(2)
        for lin, w, b in ((theirs.q_proj, wq, bq), (theirs.k_proj, wk, bk), (theirs.v_proj, wv, bv),
                          (theirs.out_proj, ours.out_proj.weight, ours.out_proj.bias)):
            lin.weight.copy_(w)
            lin.bias.copy_(b)
    return theirs


def _randomize(module):
    with torch.no_grad():
        for p in module.parameters():
            p.normal_(0, 0.3)


def test_self_attention_matches_fairseq_multihead_attention():
    ours = FusedSelfAttention(16, 4)
    _randomize(ours)
    theirs = _fairseq_mha_like(ours, self_attention=True)
    x = torch.randn(3, 7, 16, requires_grad=True)
    mask = padding_mask([7, 5, 2], 7)
    out, _ = ours(x, key_padding_mask=mask)
    ref, _ = theirs(x.transpose(0, 1), x.transpose(0, 1), x.transpose(0, 1), key_padding_mask=mask)
    torch.testing.assert_close(out, ref.transpose(0, 1), atol=1e-5, rtol=1e-5)
    g = torch.randn_like(out)
    (gx,) = torch.autograd.grad((out * g).sum(), x)
    (rx,) = torch.autograd.grad((ref.transpose(0, 1) * g).sum(), x)
    torch.testing.assert_close(gx, rx, atol=1e-5, rtol=1e-5)
    # parameter gradients: our packed QKV gradient equals fairseq's three gradients stacked
    ours.zero_grad()
    theirs.zero_grad()
    (ours(x, key_padding_mask=mask)[0] * g).sum().backward()
    (theirs(x.transpose(0, 1), x.transpose(0, 1), x.transpose(0, 1), key_padding_mask=mask)[0].transpose(0, 1)
     * g).sum().backward()
    packed = torch.cat([theirs.q_proj.weight.grad, theirs.k_proj.weight.grad, theirs.v_proj.weight.grad])
    torch.testing.assert_close(ours.qkv_proj.weight.grad, packed, atol=1e-5, rtol=1e-5)


def test_causal_self_attention_matches_fairseq_with_future_mask():
    ours = FusedSelfAttention(16, 2)
    _randomize(ours)
    theirs = _fairseq_mha_like(ours, self_attention=True)
    x = torch.randn(2, 6, 16)
    future = torch.triu(torch.full((6, 6), float("-inf")), 1)  # fairseq's buffered_future_mask
    out, _ = ours(x, causal=True)
    ref, _ = theirs(x.transpose(0, 1), x.transpose(0, 1), x.transpose(0, 1), attn_mask=future)
    torch.testing.assert_close(out, ref.transpose(0, 1), atol=1e-5, rtol=1e-5)


def test_encoder_decoder_attention_and_weights_match_fairseq():
    ours = FusedEncoderDecoderAttention(16, 4)
    _randomize(ours)
    theirs = _fairseq_mha_like(ours, self_attention=False)
    x, memory = torch.randn(3, 4, 16), torch.randn(3, 9, 16)
    mask = padding_mask([9, 6, 3], 9)
    out, weights = ours(x, memory, mask, need_weights=True)
    ref, ref_weights = theirs(x.transpose(0, 1), memory.transpose(0, 1), memory.transpose(0, 1),
                              key_padding_mask=mask, need_weights=True)  # weights averaged over heads
    torch.testing.assert_close(out, ref.transpose(0, 1), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(weights.mean(1), ref_weights, atol=1e-6, rtol=1e-5)


def test_incremental_self_attention_equals_full_causal_and_reorders():
    attn = FusedSelfAttention(16, 4).eval()
    x = torch.randn(3, 40, 16)  # 40 steps: the cache grows past its initial capacity
    full, _ = attn(x, causal=True)
    state = {}
    steps = [attn(x[:, t:t + 1], causal=True, incremental_state=state)[0] for t in range(x.size(1))]
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-5, rtol=1e-5)
    # beam search reorders rows; continuing from the reordered cache equals recomputing from scratch
    order = torch.tensor([2, 2, 0])
    attn.reorder_incremental_state(state, order)
    nxt = torch.randn(3, 1, 16)
    cont, _ = attn(nxt, causal=True, incremental_state=state)
    recomputed, _ = attn(torch.cat([x[order], nxt], 1), causal=True)
    torch.testing.assert_close(cont, recomputed[:, -1:], atol=1e-5, rtol=1e-5)


def test_chunked_incremental_self_attention_equals_full_decoding():
    """Chunks of several new queries against a non-empty cache (prefix forcing, speculative decoding)
    see the cache and the chunk up to themselves, as in one full causal pass."""
    attn = FusedSelfAttention(16, 4).eval()
    _randomize(attn)
    x = torch.randn(3, 22, 16)
    with torch.no_grad():
        full, full_weights = attn(x, causal=True, need_weights=True)
        for need_weights in (False, True):
            state, start, outs = {}, 0, []
            for size in (3, 1, 4, 6, 8):  # 22 steps: the cache also outgrows its capacity of 16
                out, weights = attn(x[:, start:start + size], causal=True, incremental_state=state,
                                    need_weights=need_weights)
                if need_weights:
                    torch.testing.assert_close(weights, full_weights[:, :, start:start + size, :start + size],
                                               atol=1e-6, rtol=1e-5)
                outs.append(out)
                start += size
            torch.testing.assert_close(torch.cat(outs, 1), full, atol=1e-5, rtol=1e-5)


def test_chunked_incremental_decoder_layer_equals_full_decoding():
    """The same through a decoder layer: its encoder-decoder attention gets chunks of queries too,
    and beam search's row layout (hypotheses grouped per sentence) on the way."""
    from vaswani_plugin.modules import DecoderLayer

    layer = DecoderLayer(16, 4, 32, dropout=0.0).eval()
    memory, mask = torch.randn(2, 5, 16), padding_mask([5, 3], 5)
    rows = torch.arange(2).repeat_interleave(3)  # 3 hypotheses per sentence
    x = torch.randn(6, 9, 16)
    with torch.no_grad():
        full, _ = layer(x, memory[rows], mask[rows])
        state, chunks = {}, []
        for start, stop in ((0, 2), (2, 3), (3, 7), (7, 9)):
            out, _ = layer(x[:, start:stop], memory, mask, incremental_state=state, memory_rows=rows)
            chunks.append(out)
    torch.testing.assert_close(torch.cat(chunks, 1), full, atol=1e-5, rtol=1e-5)


def test_causal_needs_at_least_as_many_keys_as_queries():
    q = torch.randn(1, 1, 4, 8)
    with pytest.raises(ValueError, match="at least as many keys as queries"):
        scaled_dot_product(q, q[:, :, :3], q[:, :, :3], causal=True)


@pytest.mark.parametrize("dtype, decoding_step, kernel", [(torch.float32, False, "sdpa"),
                                                           (torch.bfloat16, False, "explicit"),
                                                           (torch.float32, True, "explicit")])
def test_the_kernel_chosen_on_cpu(monkeypatch, dtype, decoding_step, kernel):
    """SDPA's CPU kernel is the slower one for a decoding step and for bf16 (attention_kernels docstring)."""
    called = []
    for name in ("sdpa_attention", "explicit_attention"):
        real = getattr(attention_kernels, name)
        monkeypatch.setattr(attention_kernels, name,
                            lambda *a, _real=real, _name=name: called.append(_name) or _real(*a))
    q = torch.randn(2, 2, 3, 8, dtype=dtype)
    scaled_dot_product(q, q, q, decoding_step=decoding_step)
    assert called == [f"{kernel}_attention"]


@pytest.mark.parametrize("length", [1, 5, 15, 16, 23])
def test_softmax_for_short_rows_is_the_softmax_in_values_and_gradients(length, monkeypatch):
    """Many rows shorter than a vector take four ops instead of torch's kernel (attention_kernels);
    an AVX-512 vector's 16 floats here on any CPU, so that rows of 1 to 15 take them."""
    monkeypatch.setattr(attention_kernels, "_VECTOR_FLOATS", 16)
    x = torch.randn(256, 3, length, dtype=torch.float64)  # 768 rows, over _MANY_ROWS
    x[0, 0, : length // 2] = float("-inf")  # masked keys
    x32 = x.float().requires_grad_()
    weights = attention_kernels.softmax_lastdim(x32)
    torch.testing.assert_close(weights.double(), torch.softmax(x, -1), atol=1e-6, rtol=0)
    g = torch.randn(256, 3, length, dtype=torch.float64)
    (weights * g.float()).sum().backward()
    xr = x.clone().requires_grad_()
    (torch.softmax(xr, -1) * g).sum().backward()
    torch.testing.assert_close(x32.grad.double(), xr.grad.nan_to_num(), atol=1e-6, rtol=0)

