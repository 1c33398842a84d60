"""Numerical edge cases: no NaN or Inf in outputs, losses or gradients, in fp32 and bf16.

All-padding key rows, sequences of length 1, batches of 1, beams wider than the hypotheses that
exist, inputs longer than anything seen in training.
"""
import pytest
import torch
from conftest import FakeTask, make_dictionary
from fairseq.sequence_generator import SequenceGenerator
from helpers import build_from_cli
from test_attention import padding_mask, reference_attention

from vaswani_plugin.criterions.label_smoothed_xent import LabelSmoothedXentCriterion
from vaswani_plugin.modules import scaled_dot_product
from vaswani_plugin.modules.positional import sinusoid_table

DTYPES = [torch.float32, torch.bfloat16]
PAD, EOS = 1, 2


def finite(*tensors):
    return all(bool(torch.isfinite(t.float()).all()) for t in tensors)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("need_weights", [False, True])
def test_all_padding_key_rows_give_zeros_and_finite_gradients(dtype, causal, need_weights):
    b, h, t, d = 3, 2, 5, 8
    q, k, v = (torch.randn(b, h, t, d).to(dtype).requires_grad_() for _ in range(3))
    mask = padding_mask([5, 0, 2], t)  # row 1: every key is padding
    out, weights = scaled_dot_product(q, k, v, mask, causal, need_weights=need_weights)
    (out.float() * torch.randn(out.shape)).sum().backward()
    assert finite(out, q.grad, k.grad, v.grad)
    assert (out[1] == 0).all() and (q.grad[1] == 0).all()  # the documented output: zeros, no gradient
    if need_weights:
        assert (weights[1] == 0).all() and finite(weights)
    # the other rows are untouched by the guard: Eq. 1 on their own
    tol = 1e-5 if dtype == torch.float32 else 3e-2
    keep = [0, 2]
    ref = reference_attention(q[keep].detach(), k[keep].detach(), v[keep].detach(), mask[keep], causal)
    torch.testing.assert_close(out[keep].double(), ref, atol=tol, rtol=tol)


def small_model(num_symbols=30, **flags):
    args = ["--encoder-layers", "2", "--decoder-layers", "2", "--d-model", "32", "--d-ff", "64",
            "--attention-heads", "4", "--share-all-embeddings", "--dropout", "0"]
    for name, value in flags.items():
        args += [f"--{name.replace('_', '-')}", str(value)]
    task = FakeTask(make_dictionary(num_symbols))
    return build_from_cli("vaswani_transformer", task, *args), task


def sample(src, tgt):
    """fairseq's layout: sources left-padded, targets right-padded, prev_output_tokens = EOS + target[:-1]."""
    src, tgt = torch.tensor(src), torch.tensor(tgt)
    prev = torch.cat([torch.full_like(tgt[:, :1], EOS), tgt[:, :-1]], 1).masked_fill(tgt.eq(PAD), PAD)
    return {"net_input": {"src_tokens": src, "src_lengths": src.ne(PAD).sum(1), "prev_output_tokens": prev},
            "target": tgt, "ntokens": int(tgt.ne(PAD).sum())}


CASES = {
    "batch of 1, length 1": sample([[EOS]], [[EOS]]),
    "length 1 beside long rows": sample([[PAD, PAD, PAD, EOS], [5, 6, 7, EOS]], [[EOS, PAD, PAD], [8, 9, EOS]]),
    "one real token": sample([[PAD, 5, EOS]], [[9, EOS]]),
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", list(CASES))
def test_short_and_single_sentences_train_without_nan(dtype, case):
    model, task = small_model()
    model = model.to(dtype).train()
    criterion = LabelSmoothedXentCriterion(task, False, 0.1, 0, False)
    loss, _, log = criterion(model, CASES[case])
    loss.backward()
    assert finite(loss, log["nll_loss"])
    assert all(finite(p.grad) for p in model.parameters() if p.grad is not None)


@pytest.mark.parametrize("dtype", DTYPES)
def test_beam_wider_than_the_vocabulary_gives_finite_scores(dtype):
    model, task = small_model(num_symbols=3)  # 3 words + 4 specials: fewer continuations than 2 * beam
    model = model.to(dtype).eval()
    src = torch.tensor([[PAD, PAD, 5, EOS], [4, 5, 6, EOS], [PAD, PAD, PAD, EOS]])
    generator = SequenceGenerator([model], task.target_dictionary, beam_size=8, max_len_b=6)
    hypos = generator.forward({"net_input": {"src_tokens": src, "src_lengths": src.ne(PAD).sum(1)}})
    assert len(hypos) == 3
    for sentence in hypos:
        assert 1 <= len(sentence) <= 8
        for h in sentence:
            assert finite(h["score"], h["positional_scores"]) and h["tokens"][-1] == EOS


def test_inputs_longer_than_training_extrapolate_the_sinusoids():
    """§3.5: the sinusoids exist for any position; a 1500-token input (the table starts at 1024)
    encodes to finite values and its positions are the formula's."""
    model, _ = small_model(max_source_positions=64)
    model.eval()
    src = torch.randint(4, 30, (1, 1500))
    src[0, -1] = EOS
    with torch.no_grad():
        memory = model.encoder(src)["memory"]
    assert memory.shape == (1, 1500, 32) and finite(memory)
    positions = model.encoder.embedding.positions
    torch.testing.assert_close(positions(src)[0], sinusoid_table(1500, 32, "paper"))
