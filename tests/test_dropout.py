"""modules/dropout.py: F.dropout with masks of one 32-bit draw per two elements (CPU). Checked against
the definition of dropout (independent drops with probability p', survivors scaled by 1 / (1 - p'))
and against gradients worked out from the mask, and the one departure (p rounded to 2^-15) pinned."""
import pytest
import torch
import torch.nn.functional as F

from vaswani_plugin.modules import dropout, dropout_add
from vaswani_plugin.modules.dropout import keep_mask


def _effective_p(p):
    return round(p * 32768) / 32768


@pytest.mark.parametrize("p", [0.1, 0.3, 0.5])
def test_each_element_is_dropped_with_p_rounded_to_a_multiple_of_2_to_the_minus_15(p):
    torch.manual_seed(0)
    n = 1 << 22
    kept = keep_mask((n,), p)
    assert kept.dtype == torch.bool and kept.shape == (n,)
    p_eff = _effective_p(p)
    assert abs(p_eff - p) <= 2 ** -16
    sd = (p_eff * (1 - p_eff) / (n / 2)) ** 0.5
    # both 16-bit halves of every draw (even and odd positions) drop at the same rate
    for half in (kept[0::2], kept[1::2]):
        assert abs((~half).float().mean().item() - p_eff) < 5 * sd


def test_drops_are_independent_of_their_neighbours():
    """Neighbours share one 32-bit draw: their drops must still be uncorrelated."""
    torch.manual_seed(1)
    kept = keep_mask((1 << 22,), 0.5).float()
    for lag in (1, 2, 3):
        a, b = kept[:-lag] - 0.5, kept[lag:] - 0.5
        corr = (a * b).mean() / 0.25
        assert abs(corr.item()) < 5 / (kept.numel() ** 0.5)


def test_odd_sizes_and_shapes():
    torch.manual_seed(2)
    assert keep_mask((3, 5, 7), 0.1).shape == (3, 5, 7)
    x = torch.randn(3, 5, 7)
    y = dropout(x, 0.1, True)
    assert y.shape == x.shape


@pytest.mark.parametrize("with_residual", [True, False])
def test_values_and_gradients_follow_the_mask(with_residual):
    p = 0.1
    scale = 1 / (1 - _effective_p(p))
    x = torch.randn(4, 6, 10, requires_grad=True)
    residual = torch.randn(4, 6, 10, requires_grad=True)
    torch.manual_seed(3)
    kept = keep_mask(x.shape, p)
    torch.manual_seed(3)  # the same draws again
    y = dropout_add(residual, x, p, True) if with_residual else dropout(x, p, True)
    expected = torch.where(kept, x.detach() * scale, torch.zeros(()))
    if with_residual:
        expected = expected + residual.detach()
    torch.testing.assert_close(y, expected, rtol=1e-6, atol=1e-6)
    upstream = torch.randn_like(y)
    y.backward(upstream)
    torch.testing.assert_close(x.grad, torch.where(kept, upstream * scale, torch.zeros(())), rtol=1e-6, atol=1e-6)
    if with_residual:
        assert torch.equal(residual.grad, upstream)
    else:
        assert residual.grad is None


def test_the_expected_output_is_the_input():
    torch.manual_seed(4)
    x = torch.full((1 << 21,), 2.0)
    assert abs(dropout(x, 0.3, True).mean().item() - 2.0) < 0.01


def test_the_same_seed_gives_the_same_mask_as_fairseqs_seeding_expects():
    x = torch.randn(64, 64)
    torch.manual_seed(5)
    a = dropout(x, 0.1, True)
    torch.manual_seed(5)
    assert torch.equal(dropout(x, 0.1, True), a)


def test_evaluation_and_p_zero_are_the_identity_and_p_one_drops_all():
    x = torch.randn(8, 8)
    assert torch.equal(dropout(x, 0.1, False), x)
    assert torch.equal(dropout(x, 0.0, True), x)
    r = torch.randn(8, 8)
    assert torch.equal(dropout_add(r, x, 0.1, False), r + x)
    assert torch.equal(dropout(x, 1.0, True), F.dropout(x, 1.0, True))  # p = 1 takes F.dropout: zeros


def test_bf16_inputs_stay_bf16():
    x = torch.randn(16, 16, dtype=torch.bfloat16, requires_grad=True)
    y = dropout_add(torch.zeros(16, 16, dtype=torch.bfloat16), x, 0.1, True)
    assert y.dtype == torch.bfloat16
    y.sum().backward()
    assert x.grad.dtype == torch.bfloat16


@pytest.mark.parametrize("p", [1e-6, 1 - 1e-6])
def test_a_p_that_rounds_to_0_or_1_takes_f_dropout(p):
    """2^-15 steps cannot express these: F.dropout's own result, with its seed, and a finite scale."""
    x = torch.randn(64, 64)
    torch.manual_seed(6)
    ours = dropout(x, p, True)
    torch.manual_seed(6)
    assert torch.equal(ours, F.dropout(x, p, True)) and torch.isfinite(ours).all()


@pytest.mark.parametrize("numel", [(1 << 18) * 3 + 5, 1 << 18, 9])
def test_a_mask_drawn_in_chunks_is_the_mask_of_one_draw(numel):
    """keep_mask draws 2^18 elements at a time: the same bits as one draw of ceil(n / 2) 32-bit
    values, each giving two elements their low 15 bits of a 16-bit half (the module docstring)."""
    torch.manual_seed(6)
    draws = torch.empty((numel + 1) // 2, dtype=torch.int32).random_()
    halves = draws.view(torch.int16)[:numel].to(torch.int32) & (2 ** 15 - 1)
    expected = halves >= round(0.1 * 2 ** 15)
    torch.manual_seed(6)
    assert torch.equal(keep_mask((numel,), 0.1), expected)
