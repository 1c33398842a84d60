"""The decoding step's work between its products, in C (speed only; not in the paper).

At batch 1 a beam-4 step of the 3+3 d=256 decoder made about 300 small torch operations (issue 15's
profile: attention's bmm, scaling, masking, softmax and the head reshapes; each residual block's add
and LayerNorm), each costing microseconds of dispatch for nanoseconds of arithmetic, one thread at
a time. `decoding_kernels.c` does the same maths in a few calls:
- `grouped_attention`: Eq. 1 for every sentence's hypotheses and every head at once, reading the
  queries from the projection's output and the keys and values where the caches hold them (no
  per-head copies, no gather of the cache into one block per step);
- `bound_add_layer_norm(norm)`: x <- LayerNorm(x + y) (§3.1's post-LN block in eval), in place;
- `bound_decoder_layer(layer)`: a whole post-LN decoder layer for the step's newest token, the
  calls above and its six products (the few-row kernel, `few_rows_linear.c`) in C one after the
  other, the step's keys and values written into the cache between: one call a layer where the
  step made eleven, and about 25 torch operations less (batch 1: each call and operation cost
  microseconds of serial time that a second thread cannot share); `bound_encoder_layer(layer)` the
  same for an encoder layer (`decoding_step.encode`, once a batch);
- `BeamAdvance`: the beam search's bookkeeping after the candidates (which end a hypothesis,
  which sentences are done, the rows that go on with their tokens and scores), about 25 torch
  operations a step in `models.beam_search`'s `_advance`, in one pass;
- `follow_ancestry`: which cached keys each hypothesis sees, carried to the next step's rows;
- `compact_sentences`: a cache's blocks of the sentences that go on, moved down in place when
  others finish;
- `top_candidates`: the beam search's 2 x beam candidates per sentence, the top-k of the rows'
  log-probabilities plus their scores, in one pass that skips what cannot enter (torch.topk over
  4 x 7,800 sums took 61 us a step at batch 1).
Same formulas as `decoding_step`'s torch path (scores scaled, then masked; softmax; biased
variance), results equal to float32 rounding: tests/test_decoding_kernels.py holds the kernels to
float64 references, test_decoding_speedups.py the C layers to the modules' forward, and
test_beam_search_parity.py the search (with `BeamAdvance`) to fairseq's. Float32 on CPU only;
bfloat16 and other devices take the torch path, as do all steps where the C compiler is missing or
the build fails (`c_library`; one log line).
"""
from __future__ import annotations

import ctypes
import logging
import os
from typing import Callable, Optional, Tuple

import torch
from torch import Tensor, nn

from .c_library import compile_c_library
from .decoding_linear import kernel_panels

logger = logging.getLogger(__name__)

_HERE = os.path.dirname(os.path.abspath(__file__))
_SOURCES = (os.path.join(_HERE, "decoding_kernels.c"), os.path.join(_HERE, "few_rows_linear.c"))
_library = None
_tried = False


def available() -> bool:
    """Whether the kernels are built (building them on the first call)."""
    global _library, _tried
    if not _tried:
        _tried = True
        _library, why = compile_c_library(*_SOURCES)
        if _library is None:
            logger.warning("decoding kernels not built (%s): the decoding step stays on torch's operations", why)
        else:
            for function in (_library.grouped_attention, _library.add_layer_norm, _library.top_candidates,
                             _library.decoder_layer):
                function.restype = None
            _library.encoder_layer.restype = None
            _library.encoder_layer.argtypes = [
                ctypes.POINTER(_LayerWeights), ctypes.c_void_p, ctypes.c_long, ctypes.c_long, ctypes.c_void_p,
                ctypes.c_void_p, ctypes.c_long, ctypes.c_float, ctypes.c_int]
            _library.compact_sentences.restype = None
            _library.compact_sentences.argtypes = [ctypes.c_void_p] + [ctypes.c_long] * 4 + [ctypes.c_void_p,
                                                                                            ctypes.c_long]
            _library.follow_ancestry.restype = None
            _library.follow_ancestry.argtypes = [ctypes.c_void_p, ctypes.c_void_p] + [ctypes.c_long] * 3 + [
                ctypes.c_void_p, ctypes.c_long, ctypes.c_long]
            _library.beam_advance.restype = ctypes.c_long
            _library.beam_advance.argtypes = (
                [ctypes.c_void_p, ctypes.c_void_p] + [ctypes.c_long] * 6 + [ctypes.c_void_p, ctypes.c_int]
                + [ctypes.c_void_p] * 8 + [ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p] + [ctypes.c_long] * 2)
            _library.grouped_attention.argtypes = [
                ctypes.c_void_p, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_long, ctypes.c_long,
                ctypes.c_long, ctypes.c_void_p, ctypes.c_long, ctypes.c_long, ctypes.c_long, ctypes.c_long,
                ctypes.c_long, ctypes.c_long, ctypes.c_float, ctypes.c_void_p, ctypes.c_int]
            _library.add_layer_norm.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                                                ctypes.c_long, ctypes.c_long, ctypes.c_float, ctypes.c_int]
            _library.top_candidates.argtypes = [ctypes.c_void_p, ctypes.c_void_p] + [ctypes.c_long] * 5 + [
                ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int]
            _library.decoder_layer.argtypes = [
                ctypes.POINTER(_LayerWeights), ctypes.c_void_p, ctypes.c_long, ctypes.c_long, ctypes.c_void_p,
                ctypes.c_void_p, ctypes.c_void_p, ctypes.c_long, ctypes.c_long, ctypes.c_long, ctypes.c_long,
                ctypes.c_void_p, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_long, ctypes.c_long,
                ctypes.c_long, ctypes.c_void_p, ctypes.c_long, ctypes.c_float, ctypes.c_int]
    return _library is not None


def takes(x: Tensor) -> bool:
    """Whether a step on activations like `x` runs on the kernels."""
    return x.dtype == torch.float32 and x.device.type == "cpu" and available()


def grouped_attention(q: Tensor, k: Tensor, v: Tensor, bias: Optional[Tensor], scale: float) -> Tensor:
    """Eq. 1 per sentence and head: q [N g, >= H d_k] (g query rows per sentence; a row's first H d_k
    columns, head-major, are its queries: a view of a projection's output is fine); k, v [N, H, S, d_k]
    (views of caches: d_k contiguous, keys d_k apart, the same strides for both); bias [N H, g or 1, S]
    with S contiguous, or None -> out [N g, H d_k], heads side by side as the out-projection takes them."""
    n, heads, length, d_k = k.shape
    assert q.stride(1) == 1 and k.stride()[2:] == (d_k, 1) and v.stride() == k.stride() and k.dtype == torch.float32
    out = q.new_empty(q.size(0), heads * d_k)
    if bias is not None:
        assert bias.stride(2) == 1 and bias.size(0) == n * heads and bias.size(2) == length
    _library.grouped_attention(
        q.data_ptr(), q.stride(0), k.data_ptr(), v.data_ptr(), k.stride(0), k.stride(1), length,
        None if bias is None else bias.data_ptr(), 0 if bias is None else bias.stride(0),
        0 if bias is None or bias.size(1) == 1 else bias.stride(1), n, q.size(0) // n, heads, d_k, scale,
        out.data_ptr(), torch.get_num_threads())
    return out


def bound_add_layer_norm(norm: nn.LayerNorm) -> Callable[[Tensor, Tensor], Tensor]:
    """(x, y) -> x <- norm(x + y), in place (x, y [rows, d] contiguous float32), with the norm's
    parameters and torch's thread count read once, for the steps of one search (reading them every
    call cost twice the call itself)."""
    function, threads = _library.add_layer_norm, torch.get_num_threads()
    gain, bias, eps, d = norm.weight.data_ptr(), norm.bias.data_ptr(), norm.eps, norm.weight.numel()

    def call(x: Tensor, y: Tensor) -> Tensor:
        assert x.is_contiguous() and y.is_contiguous() and x.shape == y.shape and x.size(1) == d
        function(x.data_ptr(), y.data_ptr(), gain, bias, x.size(0), d, eps, threads)
        return x

    return call


class _LayerWeights(ctypes.Structure):
    """decoding_kernels.c's `struct layer_weights`."""
    _fields_ = ([(name, ctypes.c_void_p) for name in ("qkv", "qkv_bias", "self_out", "self_out_bias", "cross_q",
                                                       "cross_q_bias", "cross_out", "cross_out_bias", "fc1",
                                                       "fc1_bias", "fc2", "fc2_bias")]
                + [("gain", ctypes.c_void_p * 3), ("beta", ctypes.c_void_p * 3), ("eps", ctypes.c_float * 3),
                   ("d", ctypes.c_long), ("heads", ctypes.c_long), ("d_ff", ctypes.c_long)])


def _layer_weights(layer: nn.Module, blocks, cross: tuple) -> Optional[tuple]:
    """(decoding_kernels.c's `struct layer_weights` for `layer`, the tensors whose addresses it holds),
    or None where the layer does not fit: pre-LN, or a product that does not take the few-row kernel
    (`decoding_linear.kernel_panels`: not packed, hooked, not float32 on CPU). `cross`: the
    cross-attention's query and out projections (none in an encoder layer)."""
    attn, ffn = layer.self_attn, layer.ffn
    products = (attn.qkv_proj, attn.out_proj, *cross, ffn.fc1, ffn.fc2)
    panels = [kernel_panels(p) for p in products]
    if not available() or any(b.normalize_before for b in blocks) or any(p is None for p in panels):
        return None
    pointers = []
    for product, weight in zip(products, panels):
        pointers += [weight.data_ptr(), None if product.bias is None else product.bias.data_ptr()]
    if not cross:
        pointers[4:4] = [None] * 4  # no cross-attention
    norms = [b.norm for b in blocks] + [blocks[-1].norm] * (3 - len(blocks))
    weights = _LayerWeights(*pointers, (ctypes.c_void_p * 3)(*(n.weight.data_ptr() for n in norms)),
                            (ctypes.c_void_p * 3)(*(n.bias.data_ptr() for n in norms)),
                            (ctypes.c_float * 3)(*(n.eps for n in norms)), attn.qkv_proj.in_features, attn.num_heads,
                            ffn.fc1.out_features)
    return weights, panels


def bound_encoder_layer(layer: nn.Module) -> Optional[Callable[..., Tensor]]:
    """A post-LN `layers.EncoderLayer` in eval as one C call, as `bound_decoder_layer` binds a decoder
    layer -> call(x, n, s, bias) -> x [n s, d] (contiguous), updated in place: n sentences of s
    positions; bias [n H, 1, s], -inf at the padding, or None. None where the layer does not fit."""
    bound = _layer_weights(layer, (layer.attn_block, layer.ffn_block), ())  # kept by `call`: C reads them
    if bound is None:
        return None
    function, threads, scale = _library.encoder_layer, torch.get_num_threads(), layer.self_attn.head_dim ** -0.5
    d_ff = layer.ffn.fc1.out_features

    def call(x: Tensor, n: int, s: int, bias: Optional[Tensor]) -> Tensor:
        assert x.is_contiguous() and x.size(0) == n * s and (bias is None or bias.is_contiguous())
        work = x.new_empty(n * s * (5 * x.size(1) + d_ff))
        function(bound[0], x.data_ptr(), n, s, work.data_ptr(), None if bias is None else bias.data_ptr(),
                 0 if bias is None else bias.stride(0), scale, threads)
        return x

    return call


def bound_decoder_layer(layer: nn.Module) -> Optional[Callable[..., Tensor]]:
    """A post-LN `layers.DecoderLayer` in eval as one C call, its parameters and torch's thread count
    read once (a search's weights stay put) -> call(x, n, g, work, cache_k, cache_v, column, filled,
    visible, memory_k, memory_v, memory_bias) -> x, updated in place: x [n g, d] contiguous; work
    contiguous with room for [n g, 5 d + d_ff]; cache_k, cache_v [N, H, capacity, d_k] (this step's
    keys and values go to columns column .. column + g - 1, the queries attend over the first
    `filled`, row r where visible[r].flatten() is True: `BeamAncestry.visible`, [rows, steps, beam]
    with its last two dimensions dense); memory_k, memory_v, memory_bias as `grouped_attention`
    takes k, v and bias. None where the layer does not fit (`_layer_weights`)."""
    bound = _layer_weights(layer, (layer.self_attn_block, layer.cross_attn_block, layer.ffn_block),
                           (layer.cross_attn.q_proj, layer.cross_attn.out_proj))  # kept by `call`: C reads them
    if bound is None:
        return None
    function, threads, scale = _library.decoder_layer, torch.get_num_threads(), layer.self_attn.head_dim ** -0.5

    def call(x: Tensor, n: int, g: int, work: Tensor, cache_k: Tensor, cache_v: Tensor, column: int, filled: int,
             visible: Tensor, memory_k: Tensor, memory_v: Tensor, memory_bias: Optional[Tensor]) -> Tensor:
        assert x.is_contiguous() and work.is_contiguous() and cache_k.stride() == cache_v.stride()
        assert memory_k.stride() == memory_v.stride() and visible.stride()[1:] == (visible.size(2), 1)
        assert visible.dtype == torch.bool
        function(bound[0], x.data_ptr(), n, g, work.data_ptr(), cache_k.data_ptr(), cache_v.data_ptr(),
                 cache_k.stride(0), cache_k.stride(1), column, filled, visible.data_ptr(), visible.stride(0),
                 memory_k.data_ptr(), memory_v.data_ptr(),
                 memory_k.stride(0), memory_k.stride(1), memory_k.size(2),
                 None if memory_bias is None else memory_bias.data_ptr(),
                 0 if memory_bias is None else memory_bias.stride(0), scale, threads)
        return x

    return call


def top_candidates(lprobs: Tensor, offsets: Optional[Tensor], group: int, c: int) -> Tuple[Tensor, Tensor]:
    """`torch.topk((lprobs + offsets).view(live, group * V), c)` in one pass that keeps the c best:
    lprobs [rows, V] contiguous float32, offsets [rows, 1] (a column of the scores: any row stride)
    or None (0) -> (values, indices), each [live, c], best first, equal values in index order."""
    rows, vocab = lprobs.shape
    assert lprobs.is_contiguous() and 0 < c <= group * vocab and rows % group == 0
    live = rows // group
    values = lprobs.new_empty(live, c)
    indices = torch.empty(live, c, dtype=torch.long)
    _library.top_candidates(lprobs.data_ptr(), None if offsets is None else offsets.data_ptr(),
                            0 if offsets is None else offsets.stride(0), live, group, vocab, c, values.data_ptr(),
                            indices.data_ptr(), torch.get_num_threads())
    return values, indices


def compact_sentences(t: Tensor, sentences: Tensor, columns: int) -> Tensor:
    """t [N, H, capacity, d_k] float32 (a cache: the first `columns` columns filled; or contiguous, all
    of them) -> t[sentences, :, :columns] in place, as t[:m]: sentences (int64, increasing) is the
    live ones that stay. `index_select` into a new tensor allocated (and faulted in) a whole cache
    each time a sentence finished."""
    n, heads, capacity, d_k = t.shape
    assert t.dtype == torch.float32 and t.stride()[1:] == (capacity * d_k, d_k, 1) and sentences.dtype == torch.long
    sentences = sentences.contiguous()
    _library.compact_sentences(t.data_ptr(), t.stride(0), heads, capacity * d_k, columns * d_k, sentences.data_ptr(),
                               sentences.numel())
    return t[:sentences.numel()]


def follow_ancestry(visible: Tensor, into: Tensor, parents: Tensor, length: int, group: int) -> None:
    """`attention_cache.BeamAncestry.follow` written into a second buffer: into[i, :length] =
    visible[parents[i], :length], then at step `length` row i's own slot i % group alone (visible,
    into: [rows, steps, beam] bool, the same shape, contiguous; parents int64)."""
    assert visible.is_contiguous() and into.is_contiguous() and visible.shape == into.shape
    assert visible.dtype == into.dtype == torch.bool and parents.dtype == torch.long and length < visible.size(1)
    parents = parents.contiguous()
    _library.follow_ancestry(visible.data_ptr(), into.data_ptr(), visible.stride(0), visible.size(2), length,
                             parents.data_ptr(), parents.numel(), group)


class BeamAdvance:
    """`models.beam_search.VaswaniBeamSearch._advance` in one C pass, for one search of `sentences`
    sentences at beam k (its outputs' buffers made once): the same arguments and results. cand_scores
    [live, C] float32 and cand [live, C] int64 from `top_candidates`; found [live] int64 (updated in
    place); tokens [rows, >= step + 2] int64 and scores [rows, >= step + 1] float32 with their spares,
    into which the rows that go on are written -> (found per sentence that goes on, the live
    sentences that go on (None: all), each new row's parent row (None: the search is over), the
    hypotheses ended at this step as (live sentence, row, score) (None: none))."""

    def __init__(self, sentences: int, k: int, vocab: int, eos: int):
        self.k, self.vocab, self.eos = k, vocab, eos
        self.ended_live, self.ended_row, self.keep, self.parents = (
            torch.empty(n, dtype=torch.long) for n in (sentences * k, sentences * k, sentences, sentences * k))
        self.ended_score = torch.empty(sentences * k)
        self.n_ended = ctypes.c_long()
        self.pointers = [t.data_ptr() for t in (self.ended_live, self.ended_row, self.ended_score)] + [
            ctypes.addressof(self.n_ended), self.keep.data_ptr(), self.parents.data_ptr()]

    def __call__(self, step: int, last: bool, cand_scores: Tensor, cand: Tensor, group: int, found: Tensor,
                 tokens: Tensor, scores: Tensor, spare_tokens: Tensor, spare_scores: Tensor
                 ) -> Tuple[Tensor, Optional[Tensor], Optional[Tensor], Optional[Tuple[Tensor, Tensor, Tensor]]]:
        live, c = cand.shape
        assert cand_scores.is_contiguous() and cand.is_contiguous() and found.is_contiguous()
        assert cand.dtype == found.dtype == tokens.dtype == torch.long and live <= self.keep.numel()
        assert spare_tokens.stride() == tokens.stride() and spare_scores.stride() == scores.stride()
        kept = _library.beam_advance(
            cand_scores.data_ptr(), cand.data_ptr(), live, c, group, self.vocab, self.k, self.eos, found.data_ptr(),
            int(last), *self.pointers, tokens.data_ptr(), spare_tokens.data_ptr(), tokens.stride(0),
            scores.data_ptr(), spare_scores.data_ptr(), scores.stride(0), step)
        m = self.n_ended.value
        # copies: the search keeps them, and these buffers are written again next step
        ended = tuple(t[:m].clone() for t in (self.ended_live, self.ended_row, self.ended_score)) if m else None
        if kept == 0:
            return found, None, None, ended
        return found[:kept], None if kept == live else self.keep[:kept], self.parents[:kept * self.k], ended
