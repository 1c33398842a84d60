"""Eq. 1 of §3.2.1 and the one place that picks the kernel computing it (plain PyTorch).

    Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V

`explicit_attention` is Eq. 1 written out (matmul, mask, softmax, matmul): the readable reference,
and the only kernel that returns the weights. `sdpa_attention` hands the same product to
`torch.nn.functional.scaled_dot_product_attention`, with no mask, `is_causal` or a boolean mask, so
that the flash / memory-efficient kernels stay eligible on GPU and no float -inf matrix is made.
`scaled_dot_product` is the dispatch point every attention module calls: to add a kernel, add a
function beside these two and a branch there.

Definitions shared by every kernel:
- `causal` (the decoder's §3.2.3 masking): the T queries are the last T of the S key positions,
  and query i may look at key j when j <= i + S - T (T = S: the usual lower triangle; a chunk of
  new queries against a cache: each sees the cache and the chunk up to itself);
- a query that may look at no key at all (every key padding) has no softmax in Eq. 1 (0/0): its
  weights and its output are zeros, with zero gradients, where a softmax over -inf would give NaN.
"""
from typing import Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor


def visible_keys(q: Tensor, k: Tensor, key_padding_mask: Optional[Tensor], causal: bool,
                 need_mask: bool) -> Tuple[Optional[Tensor], Optional[Tensor]]:
    """-> (allowed, blind). allowed: bool [B or 1, 1, 1 or T, S], True where a query may look (None:
    everywhere, or only `causal` with T = S and `need_mask` False, which SDPA's is_causal expresses);
    blind: [B, 1, 1 or T, 1], True for a query that may look at no key (None when nothing is padded)."""
    t, s = q.size(-2), k.size(-2)
    if causal and t > s:
        raise ValueError(f"causal attention needs at least as many keys as queries, got {t} queries and {s} keys")
    allowed = None if key_padding_mask is None else ~key_padding_mask[:, None, None, :]  # [B, 1, 1, S]
    if causal and t > 1 and (allowed is not None or need_mask or t != s):
        future_hidden = torch.ones(t, s, dtype=torch.bool, device=q.device).tril(s - t)  # [T, S] allowed
        allowed = future_hidden if allowed is None else allowed & future_hidden  # [B, 1, T, S]
    blind = None
    if key_padding_mask is not None:
        blind = ~allowed.any(dim=-1, keepdim=True)  # [B, 1, 1 or T, 1]
        if q.device.type == "cpu" and not bool(blind.any()):
            return allowed, None  # the usual case; on CPU the check costs no sync and saves two passes
        allowed = allowed | blind  # let those rows look everywhere (finite), zeroed by the kernel; no sync
    return allowed, blind


_VECTOR_FLOATS = 16 if torch.backends.cpu.get_cpu_capability() == "AVX512" else 8  # float32 in one register
_MANY_ROWS = 512  # below this many rows, torch's scalar loop costs less than four ops' dispatch


def softmax_lastdim(scores: Tensor) -> Tensor:
    """softmax over the last dim in float32. torch's CPU kernel runs a scalar loop for rows shorter
    than one vector (torch 2.13, AVX-512: 222 us for 1024 rows of 15, 15 us for rows of 16), and
    decoding's rows are that short (a few steps, a short source): many such rows on CPU take
    exp(x - max) / sum as four vectorised ops (40 us), the same formula. A few rows stay on torch's
    kernel (AMD EPYC Zen 1, AVX2, us, torch / four ops: 16 rows of 7 7 / 41, 256 rows of 7 53 / 54,
    1024 rows of 7 200 / 90; rows of 8 to 15, a vector there: 1024 rows of 15 104 / 142)."""
    scores = scores.float()
    if (scores.device.type != "cpu" or scores.size(-1) >= _VECTOR_FLOATS
            or scores.numel() < _MANY_ROWS * scores.size(-1)):
        return torch.softmax(scores, dim=-1)
    e = (scores - scores.detach().amax(dim=-1, keepdim=True)).exp_()  # the max only shifts: no gradient
    return e / e.sum(dim=-1, keepdim=True)


def explicit_attention(q: Tensor, k: Tensor, v: Tensor, allowed: Optional[Tensor], blind: Optional[Tensor],
                       dropout_p: float) -> Tuple[Tensor, Tensor]:
    """Eq. 1 as written -> (output [B, H, T, d_k], weights [B, H, T, S] after dropout)."""
    scores = torch.matmul(q, k.transpose(-2, -1)) * q.size(-1) ** -0.5  # [B, H, T, S]
    if allowed is not None:
        scores = scores.masked_fill(~allowed, float("-inf"))
    weights = softmax_lastdim(scores).to(q.dtype)
    if blind is not None:
        weights = weights.masked_fill(blind, 0.0)
    weights = F.dropout(weights, p=dropout_p, training=dropout_p > 0)
    return torch.matmul(weights, v), weights  # [B, H, T, d_k]


def sdpa_attention(q: Tensor, k: Tensor, v: Tensor, allowed: Optional[Tensor], blind: Optional[Tensor],
                   dropout_p: float, is_causal: bool) -> Tensor:
    """Eq. 1 through torch's fused kernels -> output [B, H, T, d_k] (no weights)."""
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, dropout_p=dropout_p, is_causal=is_causal)
    return out if blind is None else out.masked_fill(blind, 0.0)


def scaled_dot_product(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    key_padding_mask: Optional[Tensor] = None,
    causal: bool = False,
    dropout_p: float = 0.0,
    need_weights: bool = False,
    decoding_step: bool = False,
) -> Tuple[Tensor, Optional[Tensor]]:
    """Eq. 1 on the kernel that suits the call. q: [B, H, T, d_k]; k, v: [B, H, S, d_k];
    key_padding_mask: [B, S], True at padding. Returns the output [B, H, T, d_k] and, when
    `need_weights`, the weights [B, H, T, S] (after dropout: the ones that multiplied V).

    The explicit kernel when the weights are wanted, and on CPU for a `decoding_step` (a few queries
    against a cache), where SDPA's kernel is ~1.7x slower (measured, d_k 64, 1-4 queries against 16-40
    keys), and for bf16, where SDPA's CPU kernel is ~5x slower than the explicit one's bf16 matmuls
    (measured on an Intel Xeon with AMX, forward + backward, [128, 8, 32, 64]); SDPA otherwise."""
    on_cpu = q.device.type == "cpu"
    explicit = need_weights or (on_cpu and (decoding_step or q.dtype == torch.bfloat16))
    allowed, blind = visible_keys(q, k, key_padding_mask, causal, need_mask=explicit)
    if explicit:
        out, weights = explicit_attention(q, k, v, allowed, blind, dropout_p)
        return out, (weights if need_weights else None)
    is_causal = causal and allowed is None and q.size(-2) > 1
    return sdpa_attention(q, k, v, allowed, blind, dropout_p, is_causal), None
