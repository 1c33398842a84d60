"""Beam search shortcuts of the incremental decoder (issue 6), each checked against plain recomputation
or against fairseq's own transformer on the same weights:

- the encoder output is never copied per step: reorders compose into a row index, and the
  encoder-decoder attention keeps one K/V per source sentence (its hypotheses query it together);
- the self-attention cache reorders only its filled steps, into a second buffer;
- the lean beam search's own decoding step (no K/V moved: a mask of each hypothesis's ancestors)
  equals the layers' full forward;
- decoding steps on CPU take the explicit attention path;
- linear layers on CPU run through oneDNN (training and packed inference) with F.linear's results.
"""
import math
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from conftest import make_dictionary
from fairseq.sequence_generator import SequenceGenerator
from helpers import same_weight_pair

from vaswani_plugin.modules import (
    DecoderLayer,
    FusedEncoderDecoderAttention,
    FusedSelfAttention,
    ScaledEmbedding,
    use_onednn_linears_,
)
from vaswani_plugin.modules import decoding_kernels, decoding_linear, onednn_linear
from vaswani_plugin.modules.attention_cache import BeamAncestry
from vaswani_plugin.modules.decoding_step import BeamDecodingStep
from vaswani_plugin.modules.onednn_linear import OneDNNLinear, onednn_available


def test_self_attention_cache_follows_reorders_that_shrink_the_batch_and_outgrow_its_capacity():
    attn = FusedSelfAttention(16, 4).eval()
    g = torch.Generator().manual_seed(0)
    history = torch.randn(6, 1, 16, generator=g)  # the inputs each current row has seen, in order
    state = {}
    with torch.no_grad():
        attn(history, causal=True, incremental_state=state)
        for step in range(24):  # past the initial capacity of 16 steps, while rows move and leave
            rows = history.size(0)
            keep = rows - 1 if step in (5, 17) else rows  # finished sentences leave the batch
            order = torch.randint(0, rows, (keep,), generator=g)
            attn.reorder_incremental_state(state, order)
            history = torch.cat([history[order], torch.randn(keep, 1, 16, generator=g)], 1)
            out, _ = attn(history[:, -1:], causal=True, incremental_state=state)
            full, _ = attn(history, causal=True)
            torch.testing.assert_close(out, full[:, -1:], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("path", ["C layers", "C kernels", "torch operations"])
@pytest.mark.parametrize("normalize_before", [False, True])
def test_beam_decoding_step_equals_the_layers_over_each_hypothesis_history(normalize_before, path, monkeypatch):
    """The lean search's step (modules.decoding_step): one row per sentence at the first step, then 3
    hypotheses each continuing any hypothesis of its sentence; sentences leave; 20 steps outgrow the
    16-step capacity of the caches. Each row's logits must equal the modules' full forward over that
    row's own tokens, against its own sentence's padded memory: with a post-LN layer a C call
    (packed weights, as fairseq-generate has them; a pre-LN model takes the next path), with
    decoding_kernels' C kernels call by call, and on torch's operations."""
    kernels = path != "torch operations"
    if kernels and not decoding_kernels.available():
        pytest.skip("the decoding kernels are not built here (no C compiler)")
    if path == "C layers" and not onednn_linear.few_rows_linear.kernel_available():
        pytest.skip("the few-row kernel is not built here (no C compiler)")
    calls = []
    real_attention, real_norm = decoding_kernels.grouped_attention, decoding_kernels.bound_add_layer_norm
    real_layer = decoding_kernels.bound_decoder_layer
    monkeypatch.setattr(decoding_kernels, "takes", lambda x: kernels)
    monkeypatch.setattr(onednn_linear, "KERNEL_MAX_ROWS", math.inf)  # 12 rows a step: C layers, as with AVX-512
    if not kernels:  # as where no C compiler builds them: the caches' bookkeeping in torch too
        monkeypatch.setattr(decoding_kernels, "available", lambda: False)
    monkeypatch.setattr(decoding_kernels, "grouped_attention", lambda *a: calls.append("attention") or real_attention(*a))
    monkeypatch.setattr(decoding_kernels, "bound_add_layer_norm",
                        lambda norm: (lambda x, y, close=real_norm(norm): calls.append("norm") or close(x, y)))

    def bound_layer(layer):
        call = real_layer(layer)
        return None if call is None else (lambda *a: calls.append("layer") or call(*a))

    monkeypatch.setattr(decoding_kernels, "bound_decoder_layer", bound_layer)
    torch.manual_seed(0)
    d, heads, vocab, sentences, beam = 16, 4, 11, 4, 3
    embedding = ScaledEmbedding(torch.nn.Embedding(vocab, d, padding_idx=1))
    layers = torch.nn.ModuleList(DecoderLayer(d, heads, 32, 0.0, normalize_before=normalize_before) for _ in range(2))
    if path == "C layers":
        onednn_linear.use_onednn_linears_(layers, pack=True)
    final_norm = torch.nn.LayerNorm(d) if normalize_before else None
    for m in (embedding, layers, final_norm):
        if m is not None:
            m.eval()
    decoder = _decoder(embedding, layers, final_norm, packed=path == "C layers")
    memory, mask = torch.randn(sentences, 6, d), _padding_mask([6, 3, 5, 1], 6)

    def full(tokens, rows):
        x = embedding(tokens)
        for layer in layers:
            x, _ = layer(x, memory[rows], mask[rows])
        x = x if final_norm is None else final_norm(x)
        return decoder.output_layer(x[:, -1])

    g = torch.Generator().manual_seed(1)
    ancestry = BeamAncestry(sentences, beam)
    step_fn = BeamDecodingStep(decoder, memory, mask, ancestry)
    tokens = torch.full((sentences, 1), 2)  # BOS (EOS) for each sentence, then a row per hypothesis
    live, group = list(range(sentences)), 1
    buffers = []  # where each step's logits lie
    with torch.no_grad():
        for step in range(20):
            rows = torch.tensor(live).repeat_interleave(group)
            logits = step_fn(tokens[:, -1], step)
            torch.testing.assert_close(logits, full(tokens, rows), atol=1e-5, rtol=1e-5)
            buffers.append(logits.data_ptr())
            keep = [i for i in range(len(live)) if not (step in (4, 13) and i == 1)]  # a sentence ends
            parents = torch.tensor([i * group + int(torch.randint(0, group, (1,), generator=g))
                                    for i in keep for _ in range(beam)])
            ancestry.follow(parents, group=beam)
            if len(keep) < len(live):
                step_fn.keep_sentences(torch.tensor(keep))
            live, group = [live[i] for i in keep], beam
            tokens = torch.cat([tokens[parents], torch.randint(3, vocab, (parents.numel(), 1), generator=g)], 1)
    assert len(live) == 2 and step_fn.self_kv[0].k.size(2) > 16 * beam
    # per step and layer: one C call for a post-LN layer (the paper's) whose products take the kernel;
    # else two attentions, and three residual blocks closed in C where post-LN
    in_c = path == "C layers" and not normalize_before
    assert calls.count("layer") == (20 * 2 if in_c else 0)
    # the kernel writes the logits into one buffer from the second step on (the first has 4 rows, not 12)
    assert (len(set(buffers[1:])) == 1) == (path == "C layers")
    assert calls.count("attention") == (20 * 2 * 2 if kernels and not in_c else 0)
    assert calls.count("norm") == (20 * 2 * 3 if kernels and not normalize_before and not in_c else 0)


@pytest.mark.parametrize("pack", [True, False], ids=["packed (one C call a layer)", "not packed"])
def test_the_next_search_sees_weights_and_thread_counts_changed_since_the_last(pack):
    """The step's bound calls are kept from one search to the next (decoding_step._bound_layers): a
    weight changed in place, a state dict loaded, a new thread count must each reach the next search's
    step. Its first step's logits are held to the layers' full forward after each change."""
    torch.manual_seed(0)
    d, heads, vocab = 16, 4, 11
    embedding = ScaledEmbedding(torch.nn.Embedding(vocab, d, padding_idx=1)).eval()
    layers = torch.nn.ModuleList(DecoderLayer(d, heads, 32, 0.0) for _ in range(2)).eval()
    if pack:
        use_onednn_linears_(layers, pack=True)
    decoder = _decoder(embedding, layers, packed=pack)
    memory, bos = torch.randn(2, 5, d), torch.full((2, 1), 2)

    def first_step():
        return BeamDecodingStep(decoder, memory, None, BeamAncestry(2, 3))(bos[:, 0], 0)

    def full():
        x = embedding(bos)
        for layer in layers:
            x, _ = layer(x, memory, None)
        return decoder.output_layer(x[:, -1])

    threads = torch.get_num_threads()
    with torch.no_grad():
        seen = [first_step()]
        layers[1].ffn.fc2.weight.mul_(3)
        seen.append(first_step())
        torch.testing.assert_close(seen[-1], full(), atol=1e-5, rtol=1e-5)
        layers[0].load_state_dict({name: torch.randn_like(t) for name, t in layers[0].state_dict().items()})
        seen.append(first_step())
        torch.testing.assert_close(seen[-1], full(), atol=1e-5, rtol=1e-5)
        torch.set_num_threads(1 if threads > 1 else 2)
        try:
            torch.testing.assert_close(first_step(), full(), atol=1e-5, rtol=1e-5)
        finally:
            torch.set_num_threads(threads)
    assert not torch.allclose(seen[0], seen[1]) and not torch.allclose(seen[1], seen[2])


@pytest.mark.parametrize("hook_on", ["the layer", "every module"])
def test_the_decoding_step_calls_a_decoder_linear_layer_that_has_hooks_as_a_module(hook_on):
    """The step computes the layers' linear products without nn.Module.__call__, except where that
    would skip something: a forward hook on one of them, or one set for every module (a user's
    probe), still changes the logits as it changes the modules' own forward."""
    torch.manual_seed(0)
    d, heads, vocab, sentences = 16, 4, 11, 2
    embedding = ScaledEmbedding(torch.nn.Embedding(vocab, d, padding_idx=1)).eval()
    layers = torch.nn.ModuleList([DecoderLayer(d, heads, 32, 0.0)]).eval()
    onednn_linear.use_onednn_linears_(layers)
    fc1 = layers[0].ffn.fc1
    if hook_on == "the layer":
        handle = fc1.register_forward_hook(lambda module, inputs, out: out * 0.5)
    else:
        handle = torch.nn.modules.module.register_module_forward_hook(
            lambda module, inputs, out: out * 0.5 if module is fc1 else None)
    try:
        _check_the_step_equals_the_layer(embedding, layers, d, sentences)
    finally:
        handle.remove()


def _check_the_step_equals_the_layer(embedding, layers, d, sentences):
    decoder = _decoder(embedding, layers)
    memory = torch.randn(sentences, 5, d)
    tokens = torch.full((sentences, 1), 2)
    with torch.no_grad():
        x, _ = layers[0](embedding(tokens), memory, None)
        expected = decoder.output_layer(x[:, -1])
        step = BeamDecodingStep(decoder, memory, None, BeamAncestry(sentences, 3))(tokens[:, -1], 0)
    torch.testing.assert_close(step, expected, atol=1e-5, rtol=1e-5)


def _decoder(embedding, layers, final_norm=None, packed=False):
    """What BeamDecodingStep reads of a VaswaniDecoder, the output projection tied to the embedding
    and, where `packed`, packed as fairseq-generate packs it."""
    weight = embedding.embed_tokens.weight

    def output_layer(x):
        return F.linear(x, weight)

    return SimpleNamespace(embedding=embedding, layers=layers, final_norm=final_norm, output_layer=output_layer,
                           decoding_output_layer=lambda: decoding_linear.bound_linear(
                               weight, None, onednn_linear.PackedWeight() if packed else None, output_layer,
                               reuse_output=True))


def _padding_mask(lengths, width):
    return torch.arange(width)[None, :] >= torch.tensor(lengths)[:, None]  # [N, S], True at padding


def test_encoder_decoder_attention_on_shared_memory_rows_equals_per_row_copies():
    attn = FusedEncoderDecoderAttention(16, 4).eval()
    memory, mask = torch.randn(3, 7, 16), _padding_mask([7, 4, 2], 7)
    rows = torch.arange(3).repeat_interleave(4)  # beam 4, sentence-major as fairseq lays it out
    state = {}

    def check(x, rows, first_step_rows=None):
        out, weights = attn(x, memory, mask, incremental_state=state, need_weights=True, memory_rows=first_step_rows)
        ref, ref_weights = attn(x, memory[rows], mask[rows], need_weights=True)  # every row its own copy
        torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(weights, ref_weights, atol=1e-6, rtol=1e-5)

    with torch.no_grad():
        check(torch.randn(12, 1, 16), rows, first_step_rows=rows)
        cache = attn.cache.get(state)
        assert cache.k.size(0) == 3 and cache.group == 4  # one K/V per sentence, its 4 hypotheses together
        within = torch.tensor([1, 1, 0, 3, 4, 7, 6, 6, 8, 8, 11, 9])  # beams move inside their sentence
        attn.reorder_incremental_state(state, within)
        check(torch.randn(12, 1, 16), rows[within])
        # sentence 1 finished: fairseq drops its rows; K/V shrink to the two sentences left
        shrink = torch.tensor([0, 1, 2, 3, 8, 9, 10, 11])
        attn.reorder_incremental_state(state, shrink)
        assert cache.k.size(0) == 2 and cache.group == 4
        memory, mask = memory[[0, 2]], mask[[0, 2]]
        check(torch.randn(8, 1, 16), torch.arange(2).repeat_interleave(4))
        mixed = torch.tensor([5, 0, 7, 1])  # no sentence-major layout: K/V are gathered per row
        attn.reorder_incremental_state(state, mixed)
        assert cache.group == 0
        check(torch.randn(4, 1, 16), torch.tensor([1, 0, 1, 0]))
    # a full pass (no incremental state) reads the same rows without a cache
    with torch.no_grad():
        x, memory, mask = torch.randn(12, 3, 16), torch.randn(3, 7, 16), _padding_mask([7, 4, 2], 7)
        for rows in (torch.arange(3).repeat_interleave(4), torch.tensor([2, 0, 1, 1, 0, 2, 2, 1, 0, 0, 1, 2])):
            out, weights = attn(x, memory, mask, need_weights=True, memory_rows=rows)
            ref, ref_weights = attn(x, memory[rows], mask[rows], need_weights=True)
            torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(weights, ref_weights, atol=1e-6, rtol=1e-5)


def test_beam_search_hypotheses_identical_to_fairseq_while_sentences_finish_at_different_steps():
    d = make_dictionary(40)
    flags = ["--encoder-layers", "2", "--decoder-layers", "2", "--d-model", "32", "--d-ff", "64",
             "--attention-heads", "4", "--share-all-embeddings"]
    ours, theirs = same_weight_pair(d, flags, eos_bias=2.0)
    g = torch.Generator().manual_seed(3)
    lengths = [9, 3, 7, 5, 8, 4, 6, 2, 9, 5]
    src = torch.full((len(lengths), max(lengths)), d.pad())
    for i, n in enumerate(lengths):  # left-padded, as fairseq's translation task batches sources
        src[i, -n:-1] = torch.randint(d.nspecial, len(d), (n - 1,), generator=g)
        src[i, -1] = d.eos()
    sample = {"net_input": {"src_tokens": src, "src_lengths": torch.tensor(lengths)}}
    hyps = []
    for model in (ours, theirs):
        generator = SequenceGenerator([model], d, beam_size=4, len_penalty=0.6, max_len_a=0, max_len_b=12)
        hyps.append(generator.generate([model], sample))
    ends = set()
    for sent_a, sent_b in zip(*hyps):
        for h_a, h_b in zip(sent_a, sent_b):
            assert torch.equal(h_a["tokens"], h_b["tokens"])
            torch.testing.assert_close(h_a["score"], h_b["score"], rtol=0, atol=1e-5)
        ends.add(sent_a[0]["tokens"].numel())
    assert len(ends) >= 3, f"sentences should finish at different steps, best lengths {sorted(ends)}"


def test_onednn_linear_equals_f_linear_in_values_and_gradients_and_follows_changed_weights(monkeypatch):
    monkeypatch.setattr(onednn_linear, "MKL_AT_FULL_SPEED", False)  # the training products on oneDNN, on any CPU
    monkeypatch.setattr(onednn_linear, "MKL_FOR_FEW_ROWS", False)  # and decoding on oneDNN whatever the row count
    monkeypatch.setattr(onednn_linear, "KERNEL_MAX_ROWS", onednn_linear.few_rows_linear.MAX_ROWS)  # 15 rows: oneDNN's
    lin = torch.nn.Linear(16, 24)
    ref = torch.nn.Linear(16, 24)
    ref.load_state_dict(lin.state_dict())
    use_onednn_linears_(torch.nn.Sequential(lin))
    if not onednn_available():
        assert type(lin) is torch.nn.Linear
        return
    assert type(lin) is OneDNNLinear and "OneDNNLinear(in_features=16" in repr(lin)  # visible in print(model)
    x = torch.randn(3, 5, 16, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_()
    upstream = torch.randn(3, 5, 24)
    (lin(x) * upstream).sum().backward()  # training: the autograd Function, three oneDNN products
    (ref(x_ref) * upstream).sum().backward()
    torch.testing.assert_close(x.grad, x_ref.grad, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(lin.weight.grad, ref.weight.grad, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(lin.bias.grad, ref.bias.grad, atol=1e-5, rtol=1e-5)
    lin.eval()
    with torch.no_grad():  # validation between updates: fairseq's Adam writes param.data in place
        torch.testing.assert_close(lin(x), ref(x), atol=1e-5, rtol=1e-5)
        lin.weight.data.add_(1.0)
        ref.weight.data.add_(1.0)
        torch.testing.assert_close(lin(x), ref(x), atol=1e-5, rtol=1e-5)  # nothing stale while training
    use_onednn_linears_(torch.nn.Sequential(lin), pack=True)  # make_generation_fast_: decoding only
    with torch.inference_mode():
        torch.testing.assert_close(lin(x), ref(x), atol=1e-5, rtol=1e-5)  # packed weights
    assert "oneDNN" in lin.packed.copies
    with torch.no_grad():
        lin.weight.mul_(2.0)  # an in-place op on the parameter (e.g. load_state_dict): repacked
        ref.weight.mul_(2.0)
        torch.testing.assert_close(lin(x), ref(x), atol=1e-5, rtol=1e-5)
    assert torch.equal(lin.state_dict()["weight"], ref.state_dict()["weight"])  # parameters untouched


@pytest.mark.parametrize("few_rows_on_mkl, few_rows_kernel", [(False, False), (True, False), (False, True)])
def test_a_decoding_product_equals_f_linear_and_records_autograd_when_grad_is_on(monkeypatch, few_rows_on_mkl,
                                                                                 few_rows_kernel):
    """`decoding_linear.decoding_product`, the step's products with `linear`'s checks made once: the
    same values as F.linear at every layout (the few-row kernel, or W xᵀ where `MKL_FOR_FEW_ROWS`, at
    up to 8 rows, oneDNN's packed weight above), and, called while autograd records, the module's
    own differentiable forward (a caller that asks for gradients gets them)."""
    monkeypatch.setattr(onednn_linear, "MKL_AT_FULL_SPEED", False)
    monkeypatch.setattr(onednn_linear, "MKL_FOR_FEW_ROWS", few_rows_on_mkl)
    if not few_rows_kernel:
        monkeypatch.setattr(onednn_linear.few_rows_linear, "kernel_available", lambda: False)
    elif not onednn_linear.few_rows_linear.kernel_available():
        pytest.skip("the few-row kernel is not built here (no C compiler)")
    torch.manual_seed(0)
    lin = torch.nn.Linear(64, 96)
    ref = torch.nn.Linear(64, 96)
    ref.load_state_dict(lin.state_dict())
    use_onednn_linears_(torch.nn.Sequential(lin), pack=True)
    product = decoding_linear.decoding_product(lin)
    with torch.no_grad():
        for rows in (1, 4, 8, 9, 40):
            x = torch.randn(rows, 64)
            torch.testing.assert_close(product(x), ref(x), atol=1e-5, rtol=1e-5)
    x = torch.randn(4, 64, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_()
    product(x).square().sum().backward()
    ref(x_ref).square().sum().backward()
    torch.testing.assert_close(x.grad, x_ref.grad, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(lin.weight.grad, ref.weight.grad, atol=1e-5, rtol=1e-5)
