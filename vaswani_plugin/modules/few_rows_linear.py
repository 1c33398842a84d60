"""A linear layer's product for a few rows, the decoding step's case (speed only; not in the paper).

At batch 1 a beam-4 decoding step multiplies 4 rows by every weight of the decoder (19 products, 19
MB for a 3+3 d=256 model). Such a product is bound by reading the weight, but the BLAS kernels are
built for many rows and stay far below memory speed there. AMD EPYC Zen 4 (AVX-512), one thread,
the 19 weights in turn, ms for all of them: only reading them (`w.sum()`) 0.36-0.52; oneDNN's
packed weights 1.30 at 1 row, 1.73 at 4, 2.29 at 8, 2.35 at 16; MKL (`F.linear`) 3.1 at 4 rows; the
kernel of `few_rows_linear.c` 0.50 at 1 row, 0.67-0.77 at 4, 1.24 at 8, 2.5 at 16 (two threads:
0.32-0.36, 0.37-0.42, 0.67 and 1.6 against oneDNN's 0.80, 0.85, 1.62 and 1.70). So products
take the kernel up to `onednn_linear.KERNEL_MAX_ROWS` rows and oneDNN above: every row count on
AVX-512 CPUs (past 8 rows the kernel takes four panels a pass, and no library is faster at any row
count), 32 on AVX2 CPUs, `MAX_ROWS` (8) elsewhere.
Built for AVX2 only (`-mavx2 -mfma`, 4 rows a pass) on the same CPU: 0.80 ms at 4 rows against
oneDNN's 1.47, level at 8. `benchmarks/linear_micro.py` measures all of these on a given CPU.

The kernel is C, compiled on first use for this CPU (`c_library`; about 0.3 s) and called through
ctypes, which releases the GIL. It splits the outputs between torch's threads
(`torch.get_num_threads()`) with OpenMP: the .so asks for libgomp.so.1, which resolves to the one
torch has loaded. Where it cannot be built (no compiler, or a failed build: one log line says why)
`kernel_available()` is False and the products stay on the libraries (oneDNN, or MKL where its
rules in `onednn_linear` pick it).

bfloat16 (a model cast with `--bf16`) takes a second kernel where the CPU has AVX-512 bf16 (its
dot-product instruction, two products a lane): 4 rows 0.35 ms for the same 19 weights against
torch's bfloat16 `F.linear` 0.91 (and the float32 kernel's 0.65), 8 rows 0.45 / 1.06, 64 rows
3.18 / 3.72, 256 rows 12.4 / 12.7 (Zen 4, one thread).

- `supports(dtype, in_features)`: whether the kernel is built for that dtype (bfloat16: an even K);
- `to_panels(weight)`: the weight [N, K] in the kernel's layout, [ceil(N / 16), K, 16] (bfloat16:
  [ceil(N / 16), K / 2, 16, 2]), made once (`onednn_linear.PackedWeight`);
- `product(x2, panels, bias, out_features)`: x2 [M, K] @ weightᵀ + bias -> [M, N], on CPU;
  `bound_product(panels, bias, out_features)` the same as a function of x2 (and of a buffer to
  write the result into).
Results equal `F.linear`'s up to float rounding (each output's sum is taken in order over K;
bfloat16 rounded once, after the bias, as torch's bfloat16 linear rounds).
"""
from __future__ import annotations

import ctypes
import logging
import os
from typing import Callable

import torch
from torch import Tensor

from .c_library import compile_c_library

logger = logging.getLogger(__name__)

MAX_ROWS = 8  # the most rows that take the kernel on every CPU (above)
_WIDTH = 16  # outputs per panel (WIDTH in the C source)
_SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "few_rows_linear.c")

_kernel = None  # the C function once built
_kernel_bf16 = None  # its bfloat16 twin, where the CPU has AVX-512 bf16
_tried = False


def _build():
    """Compile and load the kernels -> (float32, bfloat16) ctypes functions, or Nones (with one log
    line saying why, where none is built)."""
    loaded, why = compile_c_library(_SOURCE)
    if loaded is None:
        logger.warning("few-row decoding kernel not built (%s): decoding's products fall back to oneDNN or MKL", why)
        return None, None
    functions = (loaded.few_rows_linear, getattr(loaded, "few_rows_linear_bf16", None))
    for function in filter(None, functions):
        function.restype = None
        function.argtypes = [ctypes.c_void_p, ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p,
                             ctypes.c_long, ctypes.c_void_p, ctypes.c_int]
    return functions


def kernel_available() -> bool:
    """Whether the kernel is built (building it on the first call)."""
    global _kernel, _kernel_bf16, _tried
    if not _tried:
        _tried = True
        _kernel, _kernel_bf16 = _build()
    return _kernel is not None


def supports(dtype: torch.dtype, in_features: int) -> bool:
    """Whether a product in `dtype` takes a kernel here (building them on the first call)."""
    if not kernel_available():
        return False
    return dtype == torch.float32 or (dtype == torch.bfloat16 and _kernel_bf16 is not None and in_features % 2 == 0)


def to_panels(weight: Tensor) -> Tensor:
    """weight [N, K] -> [ceil(N / 16), K, 16]: panel p, row k holds weight[16p:16p + 16, k], 0 past N;
    bfloat16: [ceil(N / 16), K / 2, 16, 2], row j holding those outputs' weights at k = 2j and 2j + 1."""
    n, k = weight.shape
    padded = weight.new_zeros(-(-n // _WIDTH) * _WIDTH, k)
    padded[:n] = weight
    if weight.dtype == torch.bfloat16:
        return padded.view(-1, _WIDTH, k // 2, 2).transpose(1, 2).contiguous()
    return padded.view(-1, _WIDTH, k).transpose(1, 2).contiguous()


def product(x2: Tensor, panels: Tensor, bias: Tensor | None, out_features: int) -> Tensor:
    """x2 [M, K] (CPU, a dtype that `supports`) times the weight `panels` holds, plus bias [N] -> [M, N]."""
    return bound_product(panels, bias, out_features)(x2)


def bound_product(panels: Tensor, bias: Tensor | None, out_features: int) -> Callable[[Tensor], Tensor]:
    """`product` with its weight, bias and torch's thread count read once, for a loop that calls it
    many times with them unchanged (a beam search's steps): a call then costs about 2 us besides the
    kernel's work, where reading them each time cost another 2-3 (decoding's 19 products a step).
    The function takes x2 and, optionally, `out`: a buffer of at least M x N elements (x2's dtype)
    that the result is written into and views, instead of a new tensor."""
    kernel = _kernel_bf16 if panels.dtype == torch.bfloat16 else _kernel
    weights, bias_at, threads = panels.data_ptr(), None if bias is None else bias.data_ptr(), torch.get_num_threads()
    in_features = panels.size(1) * (2 if panels.dtype == torch.bfloat16 else 1)
    empty = torch.empty

    def call(x2: Tensor, out: Tensor | None = None) -> Tensor:
        x2 = x2.contiguous()
        rows = x2.size(0)
        if out is None:
            out = empty(rows, out_features, dtype=x2.dtype)
        else:
            out = out.view(-1)[:rows * out_features].view(rows, out_features)
        kernel(x2.data_ptr(), rows, in_features, weights, bias_at, out_features, out.data_ptr(), threads)
        return out

    return call
