"""The lean beam search (`vaswani_plugin.models.beam_search`, issue 15) against fairseq's own
`SequenceGenerator` on the same model: every hypothesis of every sentence (not only the best) with
the same tokens, in the same order, with scores and positional scores within 1e-5, for ragged
batches whose sentences finish at different steps and at the length limit, beams 1, 4 and 8, the
length options fairseq-generate passes (--max-len-a/-b, --min-len, --lenpen, --unnormalized,
--unkpen) and bfloat16, with the weights packed as fairseq-generate has them (the few-row kernel);
plus its candidate selection, against the top-k of every sum.
"""
import copy
import math

import pytest
import torch
from conftest import make_dictionary
from fairseq.sequence_generator import SequenceGenerator
from helpers import record_kernel_rows, same_weight_pair

from vaswani_plugin.errors import ConfigError
from vaswani_plugin.models import beam_search
from vaswani_plugin.models.beam_search import VaswaniBeamSearch, top_candidates
from vaswani_plugin.modules import decoding_kernels, few_rows_linear, onednn_linear
from vaswani_plugin.modules.decoding_step import encode
from vaswani_plugin.modules.onednn_linear import use_onednn_linears_

FLAGS = ["--encoder-layers", "2", "--decoder-layers", "2", "--d-model", "32", "--d-ff", "64", "--attention-heads", "4",
         "--share-all-embeddings"]
LENGTHS = [9, 3, 7, 5, 8, 4, 6, 2, 9, 5, 1]  # the last source is EOS alone


@pytest.fixture(scope="module")
def model_and_batch():
    torch.manual_seed(0)
    d = make_dictionary(40)
    ours, _ = same_weight_pair(d, FLAGS, eos_bias=2.0)
    g = torch.Generator().manual_seed(3)
    src = torch.full((len(LENGTHS), max(LENGTHS)), d.pad())
    for i, n in enumerate(LENGTHS):  # left-padded, as fairseq's translation task batches sources
        src[i, -n:-1] = torch.randint(d.nspecial, len(d), (n - 1,), generator=g)
        src[i, -1] = d.eos()
    return ours, d, {"net_input": {"src_tokens": src, "src_lengths": torch.tensor(LENGTHS)}}


def both(model, d, sample, **options):
    """(ours, fairseq's) hypotheses for the same model, sample and generator arguments."""
    return tuple(cls([model], d, **options).generate([model], sample) for cls in (VaswaniBeamSearch, SequenceGenerator))


def assert_same(ours, reference):
    assert len(ours) == len(reference)
    for sent, (mine, theirs) in enumerate(zip(ours, reference)):
        assert len(mine) == len(theirs), sent
        for a, b in zip(mine, theirs):
            assert a.keys() == b.keys()
            assert torch.equal(a["tokens"], b["tokens"]), (sent, a["tokens"], b["tokens"])
            assert a["score"].shape == b["score"].shape == ()
            torch.testing.assert_close(a["score"], b["score"], rtol=0, atol=1e-5)
            torch.testing.assert_close(a["positional_scores"], b["positional_scores"], rtol=0, atol=1e-5)


@pytest.mark.parametrize("path", ["C kernels", "torch operations"])
@pytest.mark.parametrize("beam", [1, 4, 8])
def test_every_hypothesis_equals_fairseqs_while_sentences_finish_at_different_steps_and_at_the_limit(
        model_and_batch, beam, path, monkeypatch):
    """On decoding_kernels (float32 on CPU, where they build: the step, the candidates and the
    bookkeeping after them, `BeamAdvance`) and on torch's operations (`_advance`)."""
    if path == "C kernels" and not decoding_kernels.available():
        pytest.skip("the decoding kernels are not built here (no C compiler)")
    advances = []
    real_advance = decoding_kernels.BeamAdvance.__call__
    monkeypatch.setattr(decoding_kernels.BeamAdvance, "__call__", lambda *a: advances.append(a[1]) or real_advance(*a))
    if path == "torch operations":  # as where no C compiler builds the kernels
        monkeypatch.setattr(decoding_kernels, "takes", lambda x: False)
        monkeypatch.setattr(decoding_kernels, "available", lambda: False)
    model, d, sample = model_and_batch
    max_len = 10
    ours, reference = both(model, d, sample, beam_size=beam, len_penalty=0.6, max_len_a=0, max_len_b=max_len)
    assert_same(ours, reference)
    assert len(advances) == (max_len + 1 if path == "C kernels" else 0)  # every step, to the limit
    assert all(len(hyps) == beam for hyps in ours)
    lengths = {h["tokens"].numel() for hyps in ours for h in hyps}  # greedy (beam 1) ends at once or never
    assert len(lengths) >= (2 if beam == 1 else 4), f"hypotheses should finish at different steps: {lengths}"
    assert any(h["tokens"].numel() == max_len + 1 for hyps in ours for h in hyps), "none reached the limit"


@pytest.mark.parametrize("options", [
    {"max_len_a": 0.5, "max_len_b": 3},  # the limit follows the (padded) source length
    {"min_len": 6, "max_len_b": 12},
    {"normalize_scores": False},
    {"unk_penalty": -2.0, "len_penalty": 1.3},  # a negative penalty makes unk likely
], ids=["max-len-a", "min-len", "unnormalized", "unkpen-lenpen"])
def test_length_and_score_options_as_fairseq(model_and_batch, options):
    model, d, sample = model_and_batch
    ours, reference = both(model, d, sample, **{"beam_size": 4, "max_len_b": 10, **options})
    assert_same(ours, reference)
    if "min_len" in options:
        assert min(h["tokens"].numel() for hyps in ours for h in hyps) >= options["min_len"] + 1
    if "unk_penalty" in options:
        assert any(d.unk() in h["tokens"].tolist() for hyps in ours for h in hyps)


@pytest.mark.parametrize("every_row_count", [True, False], ids=["kernel at every row count", "kernel up to 8 rows"])
@pytest.mark.parametrize("beam", [1, 4, 8])
@pytest.mark.parametrize("sentences", [1, 2, 11])  # at beam 4: 4 and 8 rows a step; 44 rows, fewer as sentences finish
def test_packed_weights_as_fairseq_generate_has_them(model_and_batch, monkeypatch, sentences, beam, every_row_count):
    """fairseq-generate packs our weights (prepare_for_inference_): products of up to 8 rows take the
    few-row kernel where it is built, more oneDNN's packed layout (or the kernel too, where
    `KERNEL_MAX_ROWS` unbounded: AVX-512 CPUs), and where every product of a layer takes
    the kernel the layer is one C call (decoder and encoder): up to 8 rows, a search moves from one
    path to the other as its sentences finish. fairseq's generator decodes the unpacked model."""
    monkeypatch.setattr(onednn_linear, "KERNEL_MAX_ROWS", math.inf if every_row_count else few_rows_linear.MAX_ROWS)
    model, d, sample = model_and_batch
    packed = use_onednn_linears_(copy.deepcopy(model), pack=True)
    kernel_rows, layers_in_c = [], []
    record_kernel_rows(monkeypatch, lambda x2: kernel_rows.append(x2.size(0)))
    real_layer = decoding_kernels.bound_decoder_layer

    def counted_layer(layer):
        call = real_layer(layer)
        return call and (lambda *a: layers_in_c.append(a[0].size(0)) or call(*a))

    monkeypatch.setattr(decoding_kernels, "bound_decoder_layer", counted_layer)
    part = {"net_input": {name: t[:sentences] for name, t in sample["net_input"].items()}}
    options = dict(beam_size=beam, len_penalty=0.6, max_len_b=10)
    ours = VaswaniBeamSearch([packed], d, **options).generate([packed], part)
    assert_same(ours, SequenceGenerator([model], d, **options).generate([model], part))
    if few_rows_linear.kernel_available():
        assert every_row_count or max(kernel_rows, default=0) <= few_rows_linear.MAX_ROWS  # products call by call
        if decoding_kernels.available() and (every_row_count or sentences * beam <= 8):
            assert layers_in_c  # the decoder's layers ran in C, their products on the kernel


def test_bfloat16_model_as_fairseq(model_and_batch):
    model, d, sample = model_and_batch
    ours, reference = both(model.to(torch.bfloat16), d, sample, beam_size=4, len_penalty=0.6, max_len_b=10)
    model.float()
    assert_same(ours, reference)


def test_a_min_len_beyond_the_limit_is_one_line(model_and_batch):
    model, d, sample = model_and_batch
    with pytest.raises(ConfigError, match=r"--min-len \(12\) is larger than the length limit of this batch \(10"):
        VaswaniBeamSearch([model], d, beam_size=2, max_len_b=10, min_len=12).generate([model], sample)


def test_prefix_tokens_are_handed_to_fairseqs_generator(model_and_batch):
    model, d, sample = model_and_batch
    prefix = torch.full((len(LENGTHS), 2), d.nspecial + 3)
    ours = VaswaniBeamSearch([model], d, beam_size=3, max_len_b=8).generate([model], sample, prefix_tokens=prefix)
    reference = SequenceGenerator([model], d, beam_size=3, max_len_b=8).generate([model], sample, prefix_tokens=prefix)
    assert_same(ours, reference)
    assert all(h["tokens"][:2].tolist() == [d.nspecial + 3] * 2 for hyps in ours for h in hyps)


@pytest.mark.parametrize("path", ["C kernel", "blocks"])
@pytest.mark.parametrize("vocab", [7800, 1024, 1040])  # 1024: only whole blocks of 128; the others a short last one
@pytest.mark.parametrize("group", [1, 4])
@pytest.mark.parametrize("with_scores", [False, True])
def test_candidates_from_the_best_blocks_are_the_top_k_of_every_sum(vocab, group, with_scores, path, monkeypatch):
    """`top_candidates` against torch.topk over all of (lprobs + cumulative score), fairseq's way, on
    decoding_kernels' one pass (float32 on CPU, where it builds) and on torch's blocks. These few rows
    would take fairseq's one top-k (`_ONE_PASS`): the blocks are made to run."""
    if path == "C kernel" and not decoding_kernels.available():
        pytest.skip("the decoding kernels are not built here (no C compiler)")
    monkeypatch.setattr(decoding_kernels, "takes", lambda x: path == "C kernel")
    monkeypatch.setattr(beam_search, "_ONE_PASS", 0)
    g = torch.Generator().manual_seed(vocab + group)
    live, c = 6, 8
    lprobs = torch.log_softmax(4 * torch.randn(live * group, vocab, generator=g), -1)
    lprobs[:, 1] = float("-inf")  # pad, as the search masks it
    lprobs[0, 128:136] = 5.0 + torch.arange(8.0)  # a sentence whose c best lie in one block
    lprobs[-1, -3:] = torch.tensor([6.1, 6.3, 6.2])  # ... and one whose best are the last tokens (no ties)
    # the cumulative scores as the search hands them over: one column of its [rows, steps] buffer
    offsets = (3 * torch.randn(live * group, 5, generator=g))[:, 2:3] if with_scores else None
    total = lprobs if offsets is None else lprobs + offsets
    expected = torch.topk(total.view(live, group * vocab), c)
    scores, indices = top_candidates(lprobs, offsets, group, c)
    assert torch.equal(indices, expected.indices)
    assert torch.equal(scores, expected.values)  # the same float sums


@pytest.mark.skipif(not decoding_kernels.available(), reason="the decoding kernels are not built here")
def test_the_candidate_kernel_keeps_equal_scores_in_index_order_and_fills_with_minus_infinity():
    """Hand-worked: sentence 0's rows hold 0.5 at tokens 2 and 5 of row 0 and token 1 of row 1 (all
    equal: index order, 2, 5, 7 with V = 6), then -1 at row 1 token 0 (index 6); sentence 1 has
    three finite sums only, so its last candidate is a -inf one, the first in index order."""
    inf = float("-inf")
    lprobs = torch.tensor([[inf, -3.0, 0.5, -2.0, inf, 0.5],
                           [-1.0, 0.5, inf, inf, -4.0, inf],
                           [inf, -0.5, inf, inf, inf, inf],
                           [inf, inf, -0.25, inf, inf, -0.75]])
    values, indices = decoding_kernels.top_candidates(lprobs, None, 2, 4)
    assert indices.tolist() == [[2, 5, 7, 6], [8, 1, 11, 0]]
    assert values.tolist() == [[0.5, 0.5, 0.5, -1.0], [-0.25, -0.5, -0.75, inf]]
    offsets = torch.tensor([[0.0], [0.25], [1.0], [0.0]])  # row 1's sums rise above row 0's
    values, indices = decoding_kernels.top_candidates(lprobs, offsets, 2, 2)
    assert indices.tolist() == [[7, 2]] + [[1, 8]] and values.tolist() == [[0.75, 0.5], [0.5, -0.25]]


def test_the_encoder_in_c_equals_its_forward_on_a_ragged_batch(model_and_batch, monkeypatch):
    """The lean search's encoder (decoding_step.encode: a C call per layer, where the weights are packed
    as fairseq-generate has them) against the encoder's forward on torch's operations, left-padded
    sources of 1 to 9 tokens; the forward's where the layers do not fit or the kernel does not take
    the row count."""
    if not decoding_kernels.available() or not few_rows_linear.kernel_available():
        pytest.skip("the C kernels are not built here (no C compiler)")
    model, d, sample = model_and_batch
    packed = use_onednn_linears_(copy.deepcopy(model), pack=True)
    src = sample["net_input"]["src_tokens"]
    # one sentence with padding (a subset of a padded batch, or a <pad> typed in the input): its
    # attention bias must not be a broadcast view, which the C layers cannot read
    single = src[int(src.ne(model.encoder.dictionary.pad()).sum(1).argmin())][None]
    assert single.eq(model.encoder.dictionary.pad()).any()
    monkeypatch.setattr(onednn_linear, "KERNEL_MAX_ROWS", math.inf)  # 99 rows in C, as with AVX-512
    with torch.no_grad():
        ours, reference = encode(packed.encoder, src), model.encoder(src)
        ours_single, reference_single = encode(packed.encoder, single), model.encoder(single)
        assert encode(model.encoder, src) is None  # not packed
        monkeypatch.setattr(onednn_linear, "KERNEL_MAX_ROWS", few_rows_linear.MAX_ROWS)
        assert encode(packed.encoder, src) is None and encode(packed.encoder, src[:1, -8:]) is not None  # 99, 8 rows
    torch.testing.assert_close(ours["memory"], reference["memory"], atol=1e-5, rtol=1e-5)
    assert torch.equal(ours["memory_padding_mask"], reference["memory_padding_mask"])
    torch.testing.assert_close(ours_single["memory"], reference_single["memory"], atol=1e-5, rtol=1e-5)
