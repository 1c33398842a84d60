"""Property-based tests (hypothesis): random shapes, padding patterns and label-smoothing values
against plain references.

- attention: `scaled_dot_product` against Eq. 1 written with torch.softmax and masked_fill in
  float64 (a query with no visible key: zeros, the documented convention);
- criterion: `label_smoothed_xent` against fairseq's `label_smoothed_cross_entropy` on random
  right-padded targets, left-padded sources and eps in [0, 1).
"""
import torch
from conftest import FakeTask, make_dictionary
from fairseq.criterions.label_smoothed_cross_entropy import (
    LabelSmoothedCrossEntropyCriterion,
)
from helpers import build_from_cli
from hypothesis import given, settings
from hypothesis import strategies as st

from vaswani_plugin.criterions.label_smoothed_xent import LabelSmoothedXentCriterion
from vaswani_plugin.modules import scaled_dot_product

PAD, EOS = 1, 2
FAST = settings(max_examples=40, deadline=None, derandomize=True)


def eq1_reference(q, k, v, allowed):
    """softmax(QK^T / sqrt(d_k)) V in float64; `allowed` [B, 1, T, S] bool; blind rows -> zeros."""
    q, k, v = q.double(), k.double(), v.double()
    scores = (q @ k.transpose(-2, -1)) / q.size(-1) ** 0.5  # [B, H, T, S]
    weights = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)
    weights = weights.masked_fill(~allowed.any(-1, keepdim=True), 0.0)  # 0/0 rows: no attention at all
    return weights @ v


@st.composite
def attention_inputs(draw):
    b, h = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    causal = draw(st.booleans())
    t = draw(st.integers(1, 7))
    s = t if causal else draw(st.integers(1, 7))
    pattern = draw(st.sampled_from(["none", "random", "right", "left"]))
    if pattern == "none":
        mask = None
    elif pattern == "random":  # any pattern, all-padding rows included
        mask = torch.tensor(draw(st.lists(st.lists(st.booleans(), min_size=s, max_size=s), min_size=b, max_size=b)))
    else:
        lengths = torch.tensor(draw(st.lists(st.integers(0, s), min_size=b, max_size=b)))
        mask = torch.arange(s)[None, :] >= lengths[:, None]  # right padding
        if pattern == "left":
            mask = mask.flip(-1)
    seed = draw(st.integers(0, 2 ** 16))
    return b, h, t, s, causal, mask, seed, draw(st.booleans())


@FAST
@given(attention_inputs())
def test_attention_equals_eq1_for_any_padding(inputs):
    b, h, t, s, causal, mask, seed, need_weights = inputs
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, h, t, 8, generator=g)
    k, v = torch.randn(b, h, s, 8, generator=g), torch.randn(b, h, s, 8, generator=g)
    allowed = torch.ones(b, 1, t, s, dtype=torch.bool)
    if mask is not None:
        allowed &= ~mask[:, None, None, :]
    if causal:
        allowed &= torch.ones(t, s, dtype=torch.bool).tril()
    q.requires_grad_()
    out, _ = scaled_dot_product(q, k, v, mask, causal, need_weights=need_weights)
    torch.testing.assert_close(out.double(), eq1_reference(q.detach(), k, v, allowed), atol=1e-5, rtol=1e-5)
    out.sum().backward()
    assert torch.isfinite(q.grad).all()


MODEL_FLAGS = ["--encoder-layers", "1", "--decoder-layers", "1", "--d-model", "16", "--d-ff", "32",
               "--attention-heads", "2", "--share-all-embeddings", "--dropout", "0"]
TASK = FakeTask(make_dictionary(20))
MODEL = build_from_cli("vaswani_transformer", TASK, *MODEL_FLAGS).eval()


@st.composite
def translation_samples(draw):
    vocab = range(4, len(TASK.target_dictionary))
    b = draw(st.integers(1, 4))
    src_lens = draw(st.lists(st.integers(1, 6), min_size=b, max_size=b))
    tgt_lens = draw(st.lists(st.integers(1, 6), min_size=b, max_size=b))
    src = torch.full((b, max(src_lens)), PAD)
    tgt = torch.full((b, max(tgt_lens)), PAD)
    for i in range(b):
        words = draw(st.lists(st.sampled_from(vocab), min_size=src_lens[i] - 1, max_size=src_lens[i] - 1))
        src[i, src.size(1) - src_lens[i]:] = torch.tensor(words + [EOS])  # left-padded
        words = draw(st.lists(st.sampled_from(vocab), min_size=tgt_lens[i] - 1, max_size=tgt_lens[i] - 1))
        tgt[i, : tgt_lens[i]] = torch.tensor(words + [EOS])  # right-padded
    prev = torch.cat([torch.full((b, 1), EOS), tgt[:, :-1]], 1).masked_fill(tgt.eq(PAD), PAD)
    return {"net_input": {"src_tokens": src, "src_lengths": torch.tensor(src_lens), "prev_output_tokens": prev},
            "target": tgt, "ntokens": int(tgt.ne(PAD).sum())}


@FAST
@given(translation_samples(), st.floats(0.0, 0.99), st.booleans())
def test_criterion_equals_fairseq_for_any_lengths_and_eps(sample, eps, accuracy):
    ours = LabelSmoothedXentCriterion(TASK, False, eps, 0, accuracy)
    theirs = LabelSmoothedCrossEntropyCriterion(TASK, False, eps, 0, accuracy)
    with torch.no_grad():
        loss, size, log = ours(MODEL, sample)
        ref_loss, ref_size, ref_log = theirs(MODEL, sample)
    assert torch.isfinite(loss) and size == ref_size
    torch.testing.assert_close(loss, ref_loss, atol=1e-4, rtol=1e-5)
    torch.testing.assert_close(log["nll_loss"], ref_log["nll_loss"], atol=1e-4, rtol=1e-5)
    if accuracy:
        assert log["n_correct"] == ref_log["n_correct"] and log["total"] == ref_log["total"]
