"""The linear-layer backend: fp32 GEMMs on CPU through oneDNN (speed only; not in the paper).

Measured on an AMD EPYC with AVX-512, one thread: torch's default fp32 matmul (MKL's sgemm) reaches
~90-105 GFLOP/s on the Transformer's shapes, oneDNN's linear primitive ~170-240 GFLOP/s, for
training shapes ([4096 x 512] @ [512 x 2048], and both backward products) and decoding shapes alike;
reordering a weight once into oneDNN's blocked layout helps decoding further.
Measured on an Intel Xeon (family 6, model 167, AVX-512), two threads: MKL runs at full speed there
(forward 270-360 GFLOP/s, oneDNN the same), and it reads transposed operands in place, where
oneDNN's primitive needs a dense copy of gᵀ and xᵀ for dW = gᵀ x: MKL 260-330 GFLOP/s for that
product, oneDNN with its copies 150-170. So training's products take oneDNN only where MKL does not
run at full speed (`MKL_AT_FULL_SPEED`: MKL on an Intel CPU), and there only y = x Wᵀ and g W: dW
takes MKL on every CPU (`_OneDNNLinear`). Decoding's packed weights stay on
oneDNN, except against a small weight at a few rows (`_mkl_layout`): where MKL runs at full speed,
oneDNN's per-call cost shows there, and MKL multiplies fastest by a dense transposed copy of the
weight, [in, out] (kept beside the oneDNN copy, `PackedWeight`), below 128 rows; on a CPU whose
widest vectors are AVX2 (`MKL_FOR_FEW_ROWS`), MKL wins at up to 8 rows with the weight as the
GEMM's left operand, as stored: W xᵀ, transposed back.

- `use_onednn_linears_(module, pack)`: what the model calls where it is built (and again, with
  `pack`, once it only decodes): every CPU `nn.Linear` inside becomes a `OneDNNLinear` (same
  parameters, same state_dict; `print(model)` shows it);
- `OneDNNLinear` / `linear(x, weight, bias, packed)`: `F.linear`, through oneDNN for float32 CPU
  tensors: an autograd Function (forward and both backward products) while autograd records, the
  weight packed once (`PackedWeight`) for a model that only decodes;
- `no_grad_product(x2, weight, bias, packed)`: the product when nothing is recorded, in the layout
  the rules below pick; `decoding_linear` binds it once per layer for a decoding loop;
- `matmul_nt(a, b)`: a @ bᵀ (through oneDNN where training takes it) for the fused output loss.
Packed products (float32, and bfloat16 where the CPU has AVX-512 bf16) take our own kernel first
(`few_rows_linear`, `_kernel_takes`) up to `KERNEL_MAX_ROWS` rows: every row count on AVX-512 CPUs,
32 on AVX2 CPUs, else 8. Anything else (CUDA tensors, bfloat16 training) takes plain
`F.linear`; results equal `F.linear`'s up to float rounding (another summation order).

oneDNN keeps every primitive it creates, one per distinct product shape, in a cache of 1,024 by
default, and torch's oneDNN layer (ideep) keeps them in a cache of its own besides. Each primitive
holds memory: its JIT-compiled kernel, 0.6-4 MB. Training meets new row counts at every update, so
with those defaults a big model's fairseq-train run grew by about 1.3 GB over 8 updates (peak RSS
8.2 GB, against 6.9 GB training on MKL), and would go on growing. The plugin caps both caches at
`PRIMITIVE_CACHE_CAPACITY` (oneDNN's ONEDNN_PRIMITIVE_CACHE_CAPACITY and ideep's LRU_CACHE_CAPACITY,
read when the first primitive is created, so only where nothing in the process has used oneDNN
yet, and never over a value the user has set): enough for the distinct shapes of one update or
one decoding step. Capping one cache alone leaves the other growing.

oneDNN is reached through private torch ops (`_PRIVATE_OPS`). Each is looked up at import, and
each call goes through `_call`: if one is missing, or fails the first time it is used, one log line
says so and every linear layer falls back to `F.linear` from then on.
"""
from __future__ import annotations

import logging
import math
import os

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from . import few_rows_linear
from .c_library import cpu_fields

logger = logging.getLogger(__name__)

_PRIVATE_OPS = ("_linear_pointwise", "_reorder_linear_weight")  # torch.ops.mkldnn.*, every one used here
PRIMITIVE_CACHE_CAPACITY = 32  # primitives kept in each cache (module docstring); oneDNN's default is 1,024
CACHE_CAPACITY_VARIABLES = ("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "LRU_CACHE_CAPACITY")  # oneDNN's, ideep's
for _variable in CACHE_CAPACITY_VARIABLES:
    os.environ.setdefault(_variable, str(PRIMITIVE_CACHE_CAPACITY))


def _missing_ops() -> str | None:
    """Why oneDNN cannot be used here, or None when every op this file calls exists."""
    if not torch.backends.mkldnn.is_available():
        return "torch was built without oneDNN"
    missing = [name for name in _PRIVATE_OPS if not hasattr(torch.ops.mkldnn, name)]
    return f"torch.ops.mkldnn has no {', '.join(missing)}" if missing else None


def _fall_back(reason: str) -> None:
    global _AVAILABLE
    _AVAILABLE = False
    logger.warning("oneDNN linear layers off (%s): linear layers use F.linear", reason)


_AVAILABLE = True
_WORKED = set()  # the ops that have run once: a later failure is a real error, not a missing backend
_REASON = _missing_ops()
if _REASON is not None:
    _fall_back(_REASON)


def onednn_available() -> bool:
    return _AVAILABLE


def _cpu_vendor() -> str:
    """/proc/cpuinfo's vendor_id ("GenuineIntel", "AuthenticAMD"), "" where there is none."""
    return cpu_fields().get("vendor_id", "")


def _mkl_at_full_speed() -> bool:
    """MKL is there, on its own vendor's CPU: training's products and decoding's smallest take it
    (module docstring); oneDNN's everywhere else. AMD EPYC Zen 3 (AVX2, where oneDNN has only AVX2
    kernels too), a base training step in process, two threads, 3 alternating pairs: 541 (536-572)
    tokens/s on oneDNN, 525 (496-549) with training's products on MKL."""
    return torch.backends.mkl.is_available() and _cpu_vendor() == "GenuineIntel"


MKL_AT_FULL_SPEED = _mkl_at_full_speed()


def _mkl_for_few_rows() -> bool:
    """MKL is there and torch's CPU capability is "AVX2" (no AVX-512: AMD EPYC Zen 1 and 2, older
    Intel), where oneDNN has only AVX2 kernels too: decoding's products of a few rows by a small
    weight take MKL's sgemm as W xᵀ (`_mkl_layout`)."""
    return torch.backends.mkl.is_available() and torch.backends.cpu.get_cpu_capability() == "AVX2"


MKL_FOR_FEW_ROWS = _mkl_for_few_rows()


def _kernel_max_rows() -> float:
    """The most rows a packed product gives the few-row kernel (`few_rows_linear`): every row count
    (`math.inf`) on an AVX-512 CPU, 32 on a CPU whose widest vectors are AVX2,
    `few_rows_linear.MAX_ROWS` (8) elsewhere.
    AMD EPYC Zen 4, one thread, a 3+3 d=256 decoder's 19 weights, ms (oneDNN packed / kernel): 16
    rows 2.27 / 2.24, 256 rows 24.0-32.9 / 24.2-24.8, 1,024 rows 99.9 / 96.3; oneDNN makes a
    primitive for every new row count (~0.3 ms each). Batch 64, end to end: 66-67 against 58-61
    sentences/s with the kernel up to 8 rows only.
    Intel Xeon (family 6, model 167), where MKL and oneDNN run larger products at full speed: with one
    panel a pass, one thread, batch 64, alternating passes (kernel at every row count / up to 8 rows),
    the 3+3 model 94.8 / 89.5 sentences/s, the base shape (d 512, 32k dictionary) 11.0 / 12.1, so 8
    rows there until the kernel took four panels a pass past 8 rows (few_rows_linear.c): level with
    the libraries or faster at every row count. fairseq-generate, the 3+3 model on test2016, one
    thread, alternating runs (every row count with four panels / 8 rows, one panel): batch 64
    120.8-138.5 / 108.1-110.5 sentences/s, batch 1 (its encoder in C: 10-40 rows) 44.1-44.6 /
    38.2-41.1, the same hypotheses.
    AMD EPYC Zen 3 (family 25, model 1, AVX2: 4 rows a pass), one thread, the 19 weights (oneDNN
    packed / kernel), two runs: 16 rows 5.1-5.6 / 4.4-5.3 ms, 24 rows 6.1 / 6.4, 32 rows 8.1 / 8.0,
    48 rows 10.1 / 11.5, 64 rows 12.7-13.6 / 14.4-16.7, 256 rows 39.7 / 50.2. End to end, alternating
    passes, the same hypotheses: every row count against 8 at batch 64, 45.6 / 49.7 sentences/s; 32
    rows against 8, where a batch-1 sentence's encoder (its 10-40 rows) runs as one C call a layer
    (`decoding_step.encode`): batch 1, 100 sentences, medians 18.2 / 17.2 and 18.0 / 17.4 (two runs
    of 4 and 6 passes; single pairs 0.93x-1.16x), batch 64 level (47.7 / 46.3, pairs 0.97x-1.15x).
    benchmarks/linear_micro.py measures a CPU's row counts."""
    capability = torch.backends.cpu.get_cpu_capability()
    if capability == "AVX512":
        return math.inf
    return 32 if capability == "AVX2" else few_rows_linear.MAX_ROWS


KERNEL_MAX_ROWS = _kernel_max_rows()


def _bf16_kernel_max_rows() -> float:
    """The most rows a bfloat16 product gives the kernel: `few_rows_linear.MAX_ROWS` (8) on a CPU with
    AMX, whose tiles run torch's bfloat16 `F.linear` (oneDNN) faster than the kernel from a few rows
    up, else `KERNEL_MAX_ROWS`. Intel Xeon (family 6, model 167), one thread, ms (bfloat16 `F.linear` /
    kernel): a 3+3 d=256 decoder's 19 weights, 4 rows 0.75 / 0.55, 8 rows 0.76 / 0.89, 16 rows 0.76 /
    1.59, 256 rows 2.7 / 25.4; the base shape's 37, 1 row 8.6 / 5.0, 8 rows 5.2 / 16.4."""
    return few_rows_linear.MAX_ROWS if "amx_bf16" in cpu_fields().get("flags", "").split() else KERNEL_MAX_ROWS


BF16_KERNEL_MAX_ROWS = _bf16_kernel_max_rows()


def backend_summary() -> str:
    """What the model's build logs: which library runs its linear layers."""
    if not _AVAILABLE:
        return "F.linear"
    training = ("oneDNN forward and dX, MKL dW" if not MKL_AT_FULL_SPEED
                else "F.linear (MKL: as fast as oneDNN on this Intel CPU, no transposed copies)")
    if KERNEL_MAX_ROWS == math.inf:
        decoding = ("the few-row kernel where a C compiler builds it, else "
                    + (f"MKL against small weights below {_MKL_TRANSPOSED_BELOW} rows and " if MKL_AT_FULL_SPEED
                       else "") + "oneDNN with packed weights")
    elif MKL_AT_FULL_SPEED:  # `_mkl_layout`'s rules, after the kernel's rows
        decoding = (f"up to {KERNEL_MAX_ROWS} rows by the few-row kernel (where a C compiler builds it), then MKL "
                    f"against small weights below {_MKL_TRANSPOSED_BELOW} rows, more by oneDNN with packed weights")
    else:
        decoding = (f"up to {KERNEL_MAX_ROWS} rows by the few-row kernel where a C compiler builds it"
                    + (f" (else MKL against small weights at up to {_MKL_WEIGHT_LEFT_MAX_ROWS} rows)"
                       if MKL_FOR_FEW_ROWS else "")
                    + ", more by oneDNN with packed weights")
    return f"training in fp32 on CPU: {training}; decoding on CPU: {decoding}; F.linear otherwise"


class Unusable(Exception):
    """A private op failed on its first use; the caller computes the same with F.linear."""


def _call(name: str, *args) -> Tensor:
    try:
        out = getattr(torch.ops.mkldnn, name)(*args)
    except Exception as error:  # noqa: BLE001 (any failure of a private op means: not usable here)
        if name in _WORKED:
            raise
        _fall_back(f"torch.ops.mkldnn.{name} failed on first use: {type(error).__name__}: {error}")
        raise Unusable from error
    _WORKED.add(name)
    return out


def cpu_fp32(*tensors: Tensor) -> bool:
    return _AVAILABLE and all(t.device.type == "cpu" and t.dtype == torch.float32 for t in tensors)


def _linear(x2: Tensor, weight: Tensor, bias=None) -> Tensor:
    """[N, k] x [M, k] (+ [M]) -> [N, M] with oneDNN's linear primitive (dense inputs)."""
    return _call("_linear_pointwise", x2.contiguous(), weight.contiguous(), bias, "none", [], "")


def _train_fp32(*tensors: Tensor) -> bool:
    return not MKL_AT_FULL_SPEED and cpu_fp32(*tensors)


def matmul_nt(a: Tensor, b: Tensor) -> Tensor:
    """a [N, k] @ b [M, k]ᵀ -> [N, M]; oneDNN for float32 CPU tensors where training takes it
    (not `MKL_AT_FULL_SPEED`), torch's matmul otherwise."""
    if _train_fp32(a, b):
        try:
            return _linear(a, b)
        except Unusable:
            pass
    return a @ b.t()


_MKL_SMALL_WEIGHT = 2 ** 18  # elements
_MKL_TRANSPOSED_BELOW, _MKL_STORED_BELOW = 128, 16  # rows, where MKL runs at full speed
_MKL_WEIGHT_LEFT_MAX_ROWS = 8  # rows, on AVX2 CPUs


def _mkl_layout(rows: int, weight: Tensor, packed: bool) -> str | None:
    """How MKL's sgemm multiplies `rows` rows by a small weight (at most 2^18 elements, 1 MB, half
    this Xeon's L2: every weight of a d=256 model's layers, the d=512 model's [512 x 512]), or None
    for oneDNN. Where MKL runs at full speed (`MKL_AT_FULL_SPEED`, where training takes it too):
    "transposed" (x by its dense transposed copy, `packed`: a model that only decodes) below 128
    rows, else "stored" (`F.linear`, the weight as it is) below 16 rows. Where the CPU's widest
    vectors are AVX2 (`MKL_FOR_FEW_ROWS`): "weight_left" (W xᵀ, transposed back) at up to 8 rows.
    Intel Xeon, one thread, 12 distinct weights in turn, us a product (MKL with the weight as stored
    / MKL with its transposed copy / oneDNN packed): [4 x 256] x [256 x 768] 71 / 53 / 73, [64 x 256]
    x [256 x 768] 270 / 225 / 258, [16 x 512] x [512 x 512] 123 / 101 / 157, [160 x 256] x [256 x
    1024] 865 / 852 / 804. For larger weights no layout wins at every row count, and oneDNN's
    packed one wins at most ([16 x 512] x [512 x 2048] 828 / 1002 / 766; the output projection).
    AMD EPYC Zen 1 (AVX2), one thread, 4 rows, us (MKL as F.linear / as W xᵀ / oneDNN packed):
    [256 x 768] 240 / 143 / 199, [1024 x 256] 264 / 163 / 208; level at 8 rows; the output
    projection stays on oneDNN. Batch 1 end to end: 7.9-8.6 sentences/s with W xᵀ, 6.6-7.1 with
    oneDNN (RESULTS.md: "Decoding's few-row products as W xᵀ on an AVX2 CPU"). The kernel comes
    before these rules where it is built (`_kernel_takes`)."""
    if weight.numel() > _MKL_SMALL_WEIGHT:
        return None
    if MKL_AT_FULL_SPEED:
        if packed and rows < _MKL_TRANSPOSED_BELOW:
            return "transposed"
        return "stored" if rows < _MKL_STORED_BELOW else None
    return "weight_left" if MKL_FOR_FEW_ROWS and rows <= _MKL_WEIGHT_LEFT_MAX_ROWS else None


class _OneDNNLinear(torch.autograd.Function):
    """y = x Wᵀ + b and dy/dx = g W through oneDNN; dW = gᵀ x through torch's mm (MKL), which reads
    gᵀ in place where oneDNN's linear needs dense copies of gᵀ and xᵀ. AMD EPYC Zen 4, two threads,
    GFLOP/s (mm / oneDNN with its copies): [4096 x 4096]ᵀ x [4096 x 1024] 192 / 161, [4096 x 1024]ᵀ
    x [4096 x 4096] 178 / 156, [4096 x 512]ᵀ x [4096 x 2048] 191 / 119; a base training step 9.3-9.5
    -> 8.6-9.1 s (2 pairs). Intel trains on MKL throughout (`MKL_AT_FULL_SPEED`)."""

    @staticmethod
    def forward(ctx, x2, weight, bias):  # x2: [N, k]
        ctx.save_for_backward(x2, weight)
        ctx.has_bias = bias is not None
        return _linear(x2, weight, bias)  # [N, M]

    @staticmethod
    def backward(ctx, g):  # g: [N, M]
        x2, weight = ctx.saved_tensors
        grad_x = _linear(g, weight.t()) if ctx.needs_input_grad[0] else None  # [N, k]
        grad_w = torch.mm(g.t(), x2) if ctx.needs_input_grad[1] else None  # [M, k]
        grad_b = g.sum(0) if ctx.has_bias and ctx.needs_input_grad[2] else None  # [M]
        return grad_x, grad_w, grad_b


def _shaped_as_input(out: Tensor, x: Tensor) -> Tensor:
    """[N, M] -> [..., M] as x's leading dimensions; a 2-D x's product is returned as it is, not as a
    view: an in-place op on a view makes autograd copy and scatter the whole gradient (CopySlices)."""
    return out if x.dim() == 2 else out.view(*x.shape[:-1], out.size(-1))


class PackedWeight:
    """The copies of one weight that decoding multiplies by: oneDNN's blocked layout (`onednn`), the
    few-row kernel's panels (`panels`, `few_rows_linear`) and the dense transpose [in, out]
    (`transposed`, for `_mkl_layout`), each made on first use and
    re-made when the weight's data pointer or version counter moves (load_state_dict, in-place ops on
    the parameter; not in-place ops on `param.data`, which optimizers use: see `use_onednn_linears_`)."""

    def __init__(self):
        self.copies: dict[str, tuple] = {}  # layout -> ((data pointer, version) of the weight, its copy)

    def _copy(self, layout: str, weight: Tensor, make) -> Tensor:
        key = (weight.data_ptr(), weight._version)
        kept = self.copies.get(layout)
        if kept is None or kept[0] != key:
            kept = self.copies[layout] = (key, make(weight.detach()))
        return kept[1]

    def onednn(self, weight: Tensor) -> Tensor:
        return self._copy("oneDNN", weight, _blocked)

    def transposed(self, weight: Tensor) -> Tensor:
        return self._copy("transposed", weight, _dense_transpose)

    def panels(self, weight: Tensor) -> Tensor:
        return self._copy("panels", weight, few_rows_linear.to_panels)


def _blocked(weight: Tensor) -> Tensor:
    return _call("_reorder_linear_weight", weight)


def _dense_transpose(weight: Tensor) -> Tensor:
    return weight.t().contiguous()  # [in, out]


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None, packed: PackedWeight | None = None) -> Tensor:
    """`F.linear(x, weight, bias)`, through oneDNN for float32 CPU tensors: the autograd Function when
    autograd records (where training takes oneDNN), else the `packed` copies of the weight when they
    are given (oneDNN's layout, or MKL's: `_mkl_layout`)."""
    if cpu_fp32(x, weight):
        records = torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad)
        if records and MKL_AT_FULL_SPEED:
            return F.linear(x, weight, bias)
        try:
            x2 = x.reshape(-1, x.size(-1))  # [N, k]
            if records:
                # 2-D into the Function, the view outside it: autograd forbids in-place ops (the
                # feed-forward's ReLU) on a view that a custom Function returns.
                return _shaped_as_input(_OneDNNLinear.apply(x2, weight, bias), x)
            return _shaped_as_input(no_grad_product(x2, weight, bias, packed), x)
        except Unusable:
            pass
    elif packed is not None and x.dtype == weight.dtype == torch.bfloat16 and x.device.type == "cpu" \
            and not torch.is_grad_enabled():  # a bfloat16 model that only decodes
        x2 = x.reshape(-1, x.size(-1))
        if _kernel_takes(x2.size(0), weight):
            return _shaped_as_input(few_rows_linear.product(x2, packed.panels(weight), bias, weight.size(0)), x)
    return F.linear(x, weight, bias)


def _kernel_takes(rows: int, weight: Tensor) -> bool:
    """A packed product of `rows` rows takes the few-row kernel (`kernel_rows`) where it is built for
    the weight's dtype."""
    return kernel_rows(rows, weight.dtype) and few_rows_linear.supports(weight.dtype, weight.size(1))


def kernel_rows(rows: int, dtype: torch.dtype = torch.float32) -> bool:
    """Whether a packed product of `rows` rows takes the few-row kernel (where it takes the dtype): up
    to `KERNEL_MAX_ROWS` rows, bfloat16 up to `BF16_KERNEL_MAX_ROWS`."""
    return rows <= (BF16_KERNEL_MAX_ROWS if dtype == torch.bfloat16 else KERNEL_MAX_ROWS)


def no_grad_product(x2: Tensor, weight: Tensor, bias: Tensor | None, packed: PackedWeight | None) -> Tensor:
    """x2 [N, k] (float32, CPU) x weight [M, k]ᵀ (+ bias [M]) -> [N, M], nothing recorded for autograd:
    a packed weight by the few-row kernel where it takes it (`_kernel_takes`), else in the layout
    `_mkl_layout` picks, else by oneDNN (the `packed` copy when there is one)."""
    if packed is not None and _kernel_takes(x2.size(0), weight):
        return few_rows_linear.product(x2, packed.panels(weight), bias, weight.size(0))
    layout = _mkl_layout(x2.size(0), weight, packed=packed is not None)
    if layout == "stored":
        return F.linear(x2, weight, bias)
    if layout == "weight_left":  # MKL's sgemm is faster with the weight as its left operand
        out = torch.mm(weight, x2.t()) if bias is None else torch.addmm(bias.unsqueeze(1), weight, x2.t())
        return out.t().contiguous()  # [M, N] -> [N, M], dense: read strided, it slowed a step by 9%
    if layout == "transposed":
        w_t = packed.transposed(weight)  # [k, M]
        return x2 @ w_t if bias is None else torch.addmm(bias, x2, w_t)
    w = weight.contiguous() if packed is None else packed.onednn(weight)
    return _call("_linear_pointwise", x2.contiguous(), w, bias, "none", [], "")


class OneDNNLinear(nn.Linear):
    """An `nn.Linear` computed by `linear`: oneDNN for float32 CPU tensors, F.linear otherwise.
    `packed` (set by `use_onednn_linears_(..., pack=True)`) holds the weight in oneDNN's layout."""

    packed: PackedWeight | None = None

    def forward(self, x: Tensor) -> Tensor:
        return linear(x, self.weight, self.bias, self.packed)

    def _apply(self, fn, *args, **kwargs):
        """`.cuda()`, `.to(device)`: a layer that leaves the CPU becomes a plain nn.Linear again."""
        super()._apply(fn, *args, **kwargs)
        if self.weight.device.type != "cpu":
            self.__class__ = nn.Linear
            self.__dict__.pop("packed", None)
        return self


def use_onednn_linears_(module: nn.Module, pack: bool = False) -> nn.Module:
    """Make every CPU `nn.Linear` inside `module` a `OneDNNLinear` (a no-op without oneDNN). Layers on
    CUDA stay plain `nn.Linear`s, and a `OneDNNLinear` moved off the CPU becomes one again.

    `pack=True` is for a model that only decodes from now on (fairseq's make_generation_fast_): its
    weights are then packed once. Not while training: optimizers update `param.data` in place, which
    moves neither the data pointer nor the version counter `PackedWeight` watches, so a packed copy
    would go stale between validations."""
    if not _AVAILABLE:
        return module
    if pack:
        few_rows_linear.kernel_available()  # built now (or its log line said why not), not in the first step
    for sub in module.modules():
        if type(sub) is nn.Linear and sub.weight.device.type == "cpu":
            sub.__class__ = OneDNNLinear
        if pack and isinstance(sub, OneDNNLinear) and sub.packed is None:
            sub.packed = PackedWeight()
    return module
