"""The decoding step's work between its products, in C (speed only; not in the paper).

At batch 1 a beam-4 step of the 3+3 d=256 decoder made about 300 small torch operations (issue 15's
profile: attention's bmm, scaling, masking, softmax and the head reshapes; each residual block's add
and LayerNorm), each costing microseconds of dispatch for nanoseconds of arithmetic, one thread at
a time. `decoding_kernels.c` does the same maths in two calls:
- `grouped_attention`: Eq. 1 for every sentence's hypotheses and every head at once, reading the
  queries from the projection's output and the keys and values where the caches hold them (no
  per-head copies, no gather of the cache into one block per step);
- `bound_add_layer_norm(norm)`: x <- LayerNorm(x + y) (§3.1's post-LN block in eval), in place;
- `top_candidates`: the beam search's 2 x beam candidates per sentence, the top-k of the rows'
  log-probabilities plus their scores, in one pass that skips what cannot enter (torch.topk over
  4 x 7,800 sums took 61 us a step at batch 1).
Same formulas as `decoding_step`'s torch path (scores scaled, then masked; softmax; biased
variance), results equal to float32 rounding; tests/test_decoding_kernels.py holds them to it and
the search to fairseq's. Float32 on CPU only; bfloat16 and other devices take the torch path, as
do all steps where the C compiler is missing or the build fails (`c_library`; one log line).
"""
from __future__ import annotations

import ctypes
import logging
import os
from typing import Callable, Optional, Tuple

import torch
from torch import Tensor, nn

from .c_library import compile_c_library

logger = logging.getLogger(__name__)

_SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "decoding_kernels.c")
_library = None
_tried = False


def available() -> bool:
    """Whether the kernels are built (building them on the first call)."""
    global _library, _tried
    if not _tried:
        _tried = True
        _library, why = compile_c_library(_SOURCE)
        if _library is None:
            logger.warning("decoding kernels not built (%s): the decoding step stays on torch's operations", why)
        else:
            for function in (_library.grouped_attention, _library.add_layer_norm, _library.top_candidates):
                function.restype = None
            _library.grouped_attention.argtypes = [
                ctypes.c_void_p, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_long, ctypes.c_long,
                ctypes.c_long, ctypes.c_void_p, ctypes.c_long, ctypes.c_long, ctypes.c_long, ctypes.c_long,
                ctypes.c_long, ctypes.c_long, ctypes.c_float, ctypes.c_void_p, ctypes.c_int]
            _library.add_layer_norm.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                                                ctypes.c_long, ctypes.c_long, ctypes.c_float, ctypes.c_int]
            _library.top_candidates.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_long, ctypes.c_long,
                                                ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p,
                                                ctypes.c_int]
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


def top_candidates(lprobs: Tensor, offsets: Optional[Tensor], group: int, c: int) -> Tuple[Tensor, Tensor]:
    """`torch.topk((lprobs + offsets).view(live, group * V), c)` in one pass that keeps the c best:
    lprobs [rows, V] contiguous float32, offsets [rows, 1] or None (0) -> (values, indices), each
    [live, c], best first, equal values in index order."""
    rows, vocab = lprobs.shape
    assert lprobs.is_contiguous() and 0 < c <= group * vocab and rows % group == 0
    offsets = None if offsets is None else offsets.reshape(rows).contiguous()
    live = rows // group
    values = lprobs.new_empty(live, c)
    indices = torch.empty(live, c, dtype=torch.long)
    _library.top_candidates(lprobs.data_ptr(), None if offsets is None else offsets.data_ptr(), live, group, vocab, c,
                            values.data_ptr(), indices.data_ptr(), torch.get_num_threads())
    return values, indices
