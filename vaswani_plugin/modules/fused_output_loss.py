"""Pre-softmax projection (§3.4) fused with the label-smoothed cross-entropy (§5.4), chunked over tokens.

The unfused path materialises logits and log-probabilities of shape [tokens, V] (plus their gradients):
at 4,096 target tokens and a 32k vocabulary that is 512 MB per fp32 copy. Here only one [chunk, V]
block is alive at a time. While a chunk's probabilities are at hand, the forward also computes the
loss's gradients wrt the features and the projection weight (for an upstream gradient of 1); the
backward only scales them. That costs the same matmuls as the unfused path (one forward, two
backward) instead of recomputing the logits. fp16 inputs instead recompute each chunk's logits in
the backward (see `fused_output_loss` for why).
"""
from __future__ import annotations

import torch
from torch import Tensor

from .onednn_linear import matmul_nt

# Measured on the base shape (4,096 tokens, d 512, V 32k, one AVX-512 CPU thread, forward + backward,
# CPU seconds) on an AMD EPYC: unfused 5.1 s fp32 / 2.5 s bf16 and +1.46 GB peak RSS; chunks of 2,048,
# 1,024, 512: 4.4, 4.4, 4.4-4.6 s fp32 / 1.8, 1.85, 1.8 s bf16 and +0.53, 0.28, 0.16 GB (fp32). On an
# Intel Xeon (MKL, two threads, whole training steps, 4 runs each): 512 against 1,024 took 5.80-6.34 s
# against 5.90-6.00 s and peaked 3,543-3,631 MB against 3,648-3,741 MB. The peak of a step is here,
# at the end of the forward: 512 rows keep the speed with the least memory.
DEFAULT_CHUNK_TOKENS = 512


def _softmax_dtype(x: Tensor) -> torch.dtype:
    return torch.promote_types(x.dtype, torch.float32)


def _logits(x: Tensor, weight: Tensor) -> Tensor:
    """One chunk's logits, multiplied in the inputs' dtype, in at least fp32 for the softmax (as fairseq's
    log_softmax; float64 stays float64)."""
    return matmul_nt(x, weight).to(_softmax_dtype(x))  # [c, V]


def _chunk_forward(z: Tensor, t: Tensor, epsilon: float, off: float, count_correct: bool):
    """Logits z [c, V] -> (smoothed loss [c], nll [c], argmax hits [c] (None unless `count_correct`),
    log-sum-exp [c], unnormalised probabilities exp(z - max) [c, V] (z's storage) and their row sums [c]).

    With lse = log Σ exp z: nll = lse - z_t and Σ_{c≠t} -log p_c = (V-1) lse - Σ z + z_t, as
    `label_smoothed_nll_loss` sums them from log-probabilities; no [c, V] log-probability tensor.
    The argmax only when it is asked for: `max` with indices costs three times `amax` on CPU."""
    if count_correct:
        top, hits = z.max(dim=-1)  # [c]
        hits = hits.eq(t)  # argmax of the logits is the argmax of the log-probabilities
    else:
        top, hits = z.amax(dim=-1), None  # [c]
    z = z.sub_(top.unsqueeze(-1))  # [c, V], max 0: exp cannot overflow
    z_sum, z_gold = z.sum(-1), z.gather(-1, t.unsqueeze(-1)).squeeze(-1)  # [c]
    e = z.exp_()  # [c, V]
    e_sum = e.sum(-1)  # [c]
    lse = e_sum.log()  # [c], of the shifted logits
    nll = lse - z_gold
    others = (z.size(-1) - 1) * lse - z_sum + z_gold
    return (1.0 - epsilon) * nll + off * others, nll, hits, lse + top, e, e_sum


def _logit_grad_(p: Tensor, t: Tensor, scale, off, gold) -> Tensor:
    """In place: probabilities [c, V] -> scale * p - off, minus `gold` more at each target class
    (scale, off, gold: numbers or 0-d / [c, 1] tensors)."""
    g = p.mul_(scale).sub_(off)  # [c, V]
    gold = torch.as_tensor(gold, dtype=g.dtype, device=g.device)
    return g.scatter_add_(-1, t.unsqueeze(-1), (-gold).expand(t.size(0), 1))


def _add_grads(g: Tensor, x: Tensor, weight: Tensor, rows: slice, grad_x: Tensor | None,
               grad_w: Tensor | None) -> None:
    """grad_x[rows] = g W and grad_w += gᵀ x for one chunk's logit gradient g [c, V].

    g W by torch's mm, which reads W [V, d] as it is stored. oneDNN needs W's dense transposed copy
    for it, and that copy ([d, V], 131 MB at the big shape) was alive at the training step's peak.
    AMD EPYC Zen 4, two threads, [512 x 32000] x [32000 x 1024]: mm 145-185 GFLOP/s, oneDNN 145-200
    with the copy made once per call (its 30 ms shared by 8 chunks)."""
    g = g.to(x.dtype)  # the matmuls run in the inputs' dtype, as the unfused path's backward does
    if grad_x is not None:
        torch.mm(g, weight, out=grad_x[rows])  # [c, d]
    if grad_w is not None:
        if g.dtype == grad_w.dtype:
            # accumulated inside the GEMM, gᵀ read in place (MKL; the big shape's [512 x 32000]ᵀ x
            # [512 x 1024] on Zen 4, two threads: 191 GFLOP/s, oneDNN with dense copies 129)
            grad_w.addmm_(g.t(), x)  # [V, d]
        else:  # fp32 accumulator over chunks: a bf16 one would round after every chunk
            grad_w += (g.t() @ x).to(grad_w.dtype)  # [V, d]


def _grad_buffers(features: Tensor, weight: Tensor, need_x: bool, need_w: bool, dtype: torch.dtype):
    grad_x = torch.empty_like(features) if need_x else None
    grad_w = torch.zeros(weight.shape, dtype=dtype, device=weight.device) if need_w else None
    return grad_x, grad_w


class _FusedOutputLoss(torch.autograd.Function):
    """Forward: (loss sum, nll sum, n_correct) over non-pad rows. Backward: see fused_output_loss."""

    @staticmethod
    def forward(ctx, features, weight, target, epsilon, chunk_tokens, grads_now, count_correct):
        vocab, fp = weight.size(0), _softmax_dtype(features)
        loss = features.new_zeros((), dtype=fp)
        nll = torch.zeros_like(loss)
        n_correct = torch.zeros((), dtype=torch.long, device=features.device)
        lse = features.new_empty(features.size(0), dtype=fp)  # [N], for a recomputing backward
        off = epsilon / (vocab - 1)  # smoothed weight of every non-gold class
        grad_x, grad_w = _grad_buffers(features, weight, grads_now[0], grads_now[1], fp)
        for start in range(0, features.size(0), chunk_tokens):
            rows = slice(start, start + chunk_tokens)
            x, t = features[rows], target[rows]
            row_loss, row_nll, hits, lse[rows], e, e_sum = _chunk_forward(_logits(x, weight), t, epsilon, off,
                                                                          count_correct)
            loss += row_loss.sum()
            nll += row_nll.sum()
            if count_correct:
                n_correct += hits.sum()
            if any(grads_now):  # gradient of the loss alone (g_loss = 1, g_nll = 0) while p is at hand
                p_scale = e_sum.reciprocal().unsqueeze(-1)  # [c, 1]: e * p_scale = softmax
                g = _logit_grad_(e, t, p_scale, off, 1.0 - epsilon - off)
                _add_grads(g, x, weight, rows, grad_x, grad_w)
        if any(grads_now):
            ctx.save_for_backward(features, weight, target, grad_x, grad_w)
        else:
            ctx.save_for_backward(features, weight, target, lse)
        ctx.epsilon, ctx.chunk_tokens, ctx.grads_now = epsilon, chunk_tokens, any(grads_now)
        ctx.mark_non_differentiable(n_correct)
        return loss, nll, n_correct

    @staticmethod
    def backward(ctx, grad_loss, grad_nll, _grad_correct):
        if ctx.grads_now:
            return _scale_stored_grads(ctx, grad_loss, grad_nll)
        features, weight, target, lse = ctx.saved_tensors
        eps, off = ctx.epsilon, ctx.epsilon / (weight.size(0) - 1)
        g_loss, g_nll = grad_loss.to(lse.dtype), grad_nll.to(lse.dtype)
        grad_x, grad_w = _grad_buffers(features, weight, *ctx.needs_input_grad[:2], lse.dtype)
        for start in range(0, features.size(0), ctx.chunk_tokens):
            rows = slice(start, start + ctx.chunk_tokens)
            x, t = features[rows], target[rows]
            p = _logits(x, weight).sub_(lse[rows].unsqueeze(-1)).exp_()  # [c, V], recomputed
            g = _logit_grad_(p, t, g_loss + g_nll, g_loss * off, g_loss * (1.0 - eps - off) + g_nll)
            _add_grads(g, x, weight, rows, grad_x, grad_w)
        return grad_x, None if grad_w is None else grad_w.to(weight.dtype), None, None, None, None, None


def _scale_stored_grads(ctx, grad_loss, grad_nll):
    """The forward stored A = (p - q) W and B = (p - q)ᵀ x (unit g_loss). The full logit gradient is
    (g_loss + g_nll)(p - q) + g_nll (q - onehot), and q - onehot = ε/(V-1) everywhere, -ε - ε/(V-1)
    more at the target, whose products with W and x need no [N, V] matrix."""
    features, weight, target, grad_x, grad_w = ctx.saved_tensors
    fp = grad_w.dtype if grad_w is not None else _softmax_dtype(features)
    scale, g_nll = (grad_loss + grad_nll).to(fp), grad_nll.to(fp)
    off = ctx.epsilon / (weight.size(0) - 1)
    with_nll = bool(g_nll != 0)  # training backpropagates the loss only: skip the correction
    unit = bool(scale == 1)  # training's loss.backward(): the stored gradients as they are, no copies
    if grad_x is not None:
        gx = grad_x if unit else grad_x.to(fp) * scale
        if with_nll:
            gx = gx.to(fp) + g_nll * (off * weight.sum(0).to(fp) - (ctx.epsilon + off) * weight[target].to(fp))  # [N, d]
        grad_x = gx.to(features.dtype)
    if grad_w is not None:
        gw = grad_w if unit else grad_w * scale
        if with_nll:
            x = features.to(fp)
            correction = (off * x.sum(0)).expand_as(gw).clone().index_add_(0, target, x, alpha=-(ctx.epsilon + off))
            gw = gw + g_nll * correction  # [V, d]
        grad_w = gw.to(weight.dtype)
    return grad_x, grad_w, None, None, None, None, None


def fused_output_loss(
    features: Tensor,
    weight: Tensor,
    target: Tensor,
    epsilon: float,
    ignore_index: int | None = None,
    chunk_tokens: int = DEFAULT_CHUNK_TOKENS,
    count_correct: bool = True,
) -> tuple[Tensor, Tensor, Tensor | None]:
    """`label_smoothed_nll_loss(log_softmax(features @ weight.T), target, ...)` without the [N, V] tensors.

    features: [N, d] decoder outputs; weight: [V, d] pre-softmax projection (the tied embedding of
    §3.4); target: [N]. Returns (smoothed loss sum, nll sum, number of non-pad rows whose argmax is
    the target, or None without `count_correct`), the first two exactly as
    `vaswani_plugin.modules.label_smoothed_nll_loss` defines them (1 - ε on the gold class, ε / (V - 1)
    on each other class, rows equal to `ignore_index` dropped).

    Logits are computed `chunk_tokens` rows at a time in the inputs' dtype (so bf16 inputs use bf16
    matmuls, like the unfused path); the log-softmax is always fp32, as in fairseq's
    `utils.log_softmax`. Under autocast the inputs are cast to the autocast dtype first.

    Gradient (derived for one row, z = logits, p = softmax(z), q = smoothed target with Σ_c q_c = 1):
    loss = -Σ_c q_c log p_c and ∂log p_c/∂z_j = δ_cj - p_j, so
        ∂loss/∂z_j = Σ_c q_c p_j - q_j = p_j · Σ_c q_c - q_j = p_j - q_j,
    and nll is the case q = onehot(target). With upstream gradients g_loss and g_nll:
        ∂/∂z = p · (g_loss + g_nll) - g_loss · q - g_nll · onehot.
    With ∂/∂features = (∂/∂z) W and ∂/∂W = (∂/∂z)ᵀ features (accumulated over chunks in fp32), and
    q - onehot a constant matrix (ε/(V-1) everywhere, -ε at the target) whose products with W and the
    features need no [N, V] tensor, the forward stores (p - q) W and (p - q)ᵀ features and the
    backward combines them as (g_loss + g_nll)(p - q) + g_nll (q - onehot). For fp16 inputs that
    unscaled gradient would be rounded in fp16 before fairseq's loss scale multiplies it (flushing
    small probabilities to zero, and overflowing in ways the scaler cannot fix), so fp16 keeps the
    classic order: the backward recomputes each chunk's p from the saved per-row log-sum-exp and
    scales it first.
    """
    if features.dim() != 2 or weight.dim() != 2 or features.size(1) != weight.size(1):
        raise ValueError(f"fused_output_loss: features [N, d] and weight [V, d] expected, got "
                         f"{tuple(features.shape)} and {tuple(weight.shape)}")
    if chunk_tokens < 1:
        raise ValueError(f"fused_output_loss: chunk_tokens must be >= 1, got {chunk_tokens}")
    device_type = features.device.type
    if torch.is_autocast_enabled(device_type):
        dtype = torch.get_autocast_dtype(device_type)
        features, weight = features.to(dtype), weight.to(dtype)
    if ignore_index is not None:
        # Dropping pad rows here (autograd scatters their zero gradient back) also skips their matmuls.
        keep = target.ne(ignore_index)  # [N]
        features, target = features[keep], target[keep]  # [N', d], [N']
    grads_now = (False, False)
    if torch.is_grad_enabled() and features.dtype != torch.float16:
        # Gradients in the forward save the backward a third [N, d] x [d, V] matmul. Not for fp16: the
        # unscaled gradient would lose its small probabilities to fp16's range, which loss scaling guards.
        grads_now = (features.requires_grad, weight.requires_grad)
    loss, nll, n_correct = _FusedOutputLoss.apply(features, weight, target, float(epsilon), int(chunk_tokens),
                                                  grads_now, bool(count_correct))
    return loss, nll, (n_correct if count_correct else None)
