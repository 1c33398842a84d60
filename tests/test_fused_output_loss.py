"""The fused projection + label-smoothed loss against the unfused path it replaces
(F.linear -> fp32 log_softmax -> label_smoothed_nll_loss), and against float64 finite differences."""
import pytest
import torch
import torch.nn.functional as F

from vaswani_plugin.modules import fused_output_loss, label_smoothed_nll_loss, onednn_linear
from vaswani_plugin.modules.fused_output_loss import _FusedOutputLoss

PAD = 1


def _inputs(n=37, d=16, v=50, dtype=torch.float32, pads=5, device="cpu"):
    x = torch.randn(n, d).to(device, dtype).requires_grad_()
    w = (torch.randn(v, d) * d ** -0.5).to(device, dtype).requires_grad_()
    target = torch.randint(2, v, (n,))
    target[torch.randperm(n)[:pads]] = PAD
    target = target.to(device)
    return x, w, target


def _unfused(x, w, target, eps):
    lprobs = F.log_softmax(F.linear(x, w).float(), dim=-1)  # fairseq's utils.log_softmax: fp32
    loss, nll = label_smoothed_nll_loss(lprobs, target, eps, ignore_index=PAD)
    real = target.ne(PAD)
    return loss, nll, (lprobs.argmax(-1).eq(target) & real).sum()


def _both(x, w, target, eps, chunk, upstream=(2.0, 0.5)):
    x2, w2 = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    fused = fused_output_loss(x, w, target, eps, ignore_index=PAD, chunk_tokens=chunk)
    ref = _unfused(x2, w2, target, eps)
    # different upstream weights on loss and nll exercise both terms of the backward; (1, 0) is
    # training's loss.backward(), where the stored gradients are returned as they are
    (upstream[0] * fused[0] + upstream[1] * fused[1]).backward()
    (upstream[0] * ref[0] + upstream[1] * ref[1]).backward()
    return fused, ref, (x.grad, w.grad), (x2.grad, w2.grad)


@pytest.mark.parametrize("eps", [0.1, 0.0])
@pytest.mark.parametrize("chunk", [1, 8, 1000])  # many chunks, a ragged last chunk, one chunk
@pytest.mark.parametrize("mkl_at_full_speed", [False, True])  # the products' library: AMD's and Intel's choice
@pytest.mark.parametrize("upstream", [(2.0, 0.5), (1.0, 0.0)])
def test_fp32_matches_unfused_loss_nll_accuracy_and_grads(eps, chunk, mkl_at_full_speed, upstream, monkeypatch):
    monkeypatch.setattr(onednn_linear, "MKL_AT_FULL_SPEED", mkl_at_full_speed)
    x, w, target = _inputs()
    (loss, nll, correct), (rloss, rnll, rcorrect), grads, rgrads = _both(x, w, target, eps, chunk, upstream)
    torch.testing.assert_close(loss, rloss, rtol=1e-5, atol=0)
    torch.testing.assert_close(nll, rnll, rtol=1e-5, atol=0)
    assert int(correct) == int(rcorrect)
    for g, r in zip(grads, rgrads):
        torch.testing.assert_close(g, r, rtol=1e-5, atol=1e-6)
    assert x.grad[target.eq(PAD)].abs().max() == 0  # pads contribute nothing


def test_bf16_inputs_match_unfused_within_bf16_rounding():
    """bf16 matmuls on both sides, fp32 softmax: loss to 1e-3 relative; gradients (bf16 results,
    summed in a different order) to 2e-2 relative of their scale."""
    x, w, target = _inputs(n=64, d=32, v=300, dtype=torch.bfloat16)
    (loss, nll, _), (rloss, rnll, _), grads, rgrads = _both(x, w, target, 0.1, 16)
    assert loss.dtype == torch.float32
    torch.testing.assert_close(loss, rloss, rtol=1e-3, atol=0)
    torch.testing.assert_close(nll, rnll, rtol=1e-3, atol=0)
    for g, r in zip(grads, rgrads):
        assert g.dtype == torch.bfloat16
        torch.testing.assert_close(g.float(), r.float(), rtol=0, atol=2e-2 * r.float().abs().max().item())


def test_fp16_inputs_take_the_recomputing_backward_and_match_unfused():
    """fp16 keeps fairseq's loss-scaling semantics: the backward recomputes each chunk's logits."""
    x, w, target = _inputs(n=64, d=32, v=300, dtype=torch.float16)
    (loss, nll, _), (rloss, rnll, _), grads, rgrads = _both(x, w, target, 0.1, 16)
    assert loss.grad_fn is not None
    torch.testing.assert_close(loss, rloss, rtol=1e-3, atol=0)
    torch.testing.assert_close(nll, rnll, rtol=1e-3, atol=0)
    for g, r in zip(grads, rgrads):
        torch.testing.assert_close(g.float(), r.float(), rtol=0, atol=1e-2 * r.float().abs().max().item())


FP16_MAX = torch.finfo(torch.float16).max


@pytest.mark.parametrize("log2_scale", range(7, 16))  # fairseq's loss scales: from 2^7 (its init) to 2^15
def test_fp16_with_fairseqs_loss_scales_matches_fp32(log2_scale):
    """As fairseq's FP16Optimizer runs it: fp16 features and weight, the summed loss times the scale
    backpropagated, the fp16 gradients divided by the scale afterwards; against the unfused loss in
    fp32 on the same (fp16-rounded) inputs. Measured: loss 1.4e-6 relative, gradients 4e-4 to 6e-4 of
    their largest entry at every scale; at 2^14 and 2^15 the scaled gradient of W exceeds fp16's range
    and comes out inf/nan, which the scaler catches (it halves the scale and skips the update)."""
    scale = 2.0 ** log2_scale
    x, w, target = _inputs(n=512, d=64, v=2000, dtype=torch.float16, pads=40)
    x32, w32 = x.detach().float().requires_grad_(), w.detach().float().requires_grad_()
    rloss, rnll, _ = _unfused(x32, w32, target, 0.1)
    rloss.backward()
    loss, nll, _ = fused_output_loss(x, w, target, 0.1, ignore_index=PAD, chunk_tokens=128)
    (loss * scale).backward()
    torch.testing.assert_close(loss, rloss, rtol=1e-5, atol=0)
    torch.testing.assert_close(nll, rnll, rtol=1e-5, atol=0)
    for g, r in ((x.grad, x32.grad), (w.grad, w32.grad)):
        assert g.dtype == torch.float16
        largest = scale * r.abs().max().item()  # the scaled gradient's largest entry, exactly
        if largest > FP16_MAX:
            assert not torch.isfinite(g).all()  # an overflow the scaler sees, never a wrong finite value
        elif largest < FP16_MAX / 2:  # room for fp16 partial sums larger than the total
            torch.testing.assert_close(g.float() / scale, r, rtol=0, atol=2e-3 * r.abs().max().item())


def test_without_grad_only_the_loss_is_computed():
    x, w, target = _inputs()
    with torch.no_grad():
        loss, nll, correct = fused_output_loss(x, w, target, 0.1, ignore_index=PAD, chunk_tokens=8)
        ref = _unfused(x, w, target, 0.1)
    assert loss.grad_fn is None
    torch.testing.assert_close(loss, ref[0], rtol=1e-5, atol=0)
    torch.testing.assert_close(nll, ref[1], rtol=1e-5, atol=0)
    assert int(correct) == int(ref[2])


def test_autocast_computes_the_softmax_in_fp32():
    x, w, target = _inputs()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss, _, _ = fused_output_loss(x, w, target, 0.1, ignore_index=PAD, chunk_tokens=8)
        ref_loss, _, _ = _unfused(x, w, target, 0.1)
    assert loss.dtype == torch.float32
    torch.testing.assert_close(loss, ref_loss, rtol=1e-3, atol=0)
    loss.backward()
    assert x.grad.dtype == torch.float32 and w.grad.dtype == torch.float32


def test_gradcheck_float64():
    """Both backwards: gradients computed in the forward (the default) and recomputed chunk by chunk."""
    x, w, target = _inputs(n=6, d=3, v=5, dtype=torch.float64, pads=1)
    torch.autograd.gradcheck(
        lambda a, b: fused_output_loss(a, b, target, 0.2, ignore_index=PAD, chunk_tokens=4)[:2], (x, w))
    target[target.eq(PAD)] = 3
    torch.autograd.gradcheck(
        lambda a, b: _FusedOutputLoss.apply(a, b, target, 0.2, 4, (False, False), True)[:2], (x, w))


def test_bad_shapes_are_named():
    with pytest.raises(ValueError, match="features \\[N, d\\] and weight \\[V, d\\]"):
        fused_output_loss(torch.randn(3, 4), torch.randn(5, 3), torch.zeros(3, dtype=torch.long), 0.1)


@pytest.mark.parametrize("mkl_at_full_speed", [False, True])
def test_without_count_correct_loss_and_grads_are_the_same_and_no_count_is_made(mkl_at_full_speed, monkeypatch):
    """The criterion asks for the argmax count only with --report-accuracy (`max` with indices is the
    slow reduction); everything else must not move."""
    monkeypatch.setattr(onednn_linear, "MKL_AT_FULL_SPEED", mkl_at_full_speed)
    x, w, target = _inputs()
    x2, w2 = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    counted = fused_output_loss(x, w, target, 0.1, ignore_index=PAD, chunk_tokens=8)
    uncounted = fused_output_loss(x2, w2, target, 0.1, ignore_index=PAD, chunk_tokens=8, count_correct=False)
    assert uncounted[2] is None and int(counted[2]) == int(_unfused(x, w, target, 0.1)[2])
    torch.testing.assert_close(uncounted[:2], counted[:2], rtol=0, atol=0)
    counted[0].backward()
    uncounted[0].backward()
    assert torch.equal(x.grad, x2.grad) and torch.equal(w.grad, w2.grad)
