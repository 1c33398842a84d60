"""The few-row decoding kernel (modules/few_rows_linear.py and .c): x Wᵀ + b against float64
`F.linear` at every row count of a pass and past it, ragged output counts (panels of 16 with a
partial last one), with and without a bias, on one and two threads; the decoding products take it up
to `onednn_linear.KERNEL_MAX_ROWS` rows (every row count on AVX-512 CPUs, 32 on AVX2 CPUs, else 8)
and oneDNN above; a packed bfloat16 layer takes the bfloat16 kernel (up to 8 rows where the CPU has
AMX); a kernel that cannot be built leaves one log line and oneDNN."""
import logging
import math
import shutil

import pytest
import torch
import torch.nn.functional as F
from helpers import record_kernel_rows

from vaswani_plugin.modules import decoding_linear, few_rows_linear, onednn_linear

has_compiler = shutil.which("cc") is not None
needs_kernel = pytest.mark.skipif(not has_compiler, reason="no C compiler (cc) to build the kernel")



@needs_kernel
@pytest.mark.parametrize("threads", [1, 2])
def test_the_kernel_equals_f_linear_in_float64(threads):
    assert few_rows_linear.kernel_available()  # a compiler is here: the kernel must build
    g = torch.Generator().manual_seed(0)
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        # 100 and 120 outputs: four panels a pass past 8 rows with AVX-512 (a partial last panel in
        # the four for 120), then one at a time
        for out_features, in_features in ((1, 1), (15, 7), (16, 64), (17, 64), (100, 33), (120, 48), (40, 1024)):
            weight = torch.randn(out_features, in_features, generator=g)
            bias = torch.randn(out_features, generator=g)
            panels = few_rows_linear.to_panels(weight)
            assert panels.shape == (-(-out_features // 16), in_features, 16)
            for rows in (1, 2, 3, 4, 5, 7, 8, 9, 17, 30):  # a pass: up to 8 rows, 6 in fours; more take several
                x = torch.randn(rows, in_features, generator=g)
                for b in (bias, None):
                    expected = F.linear(x.double(), weight.double(), None if b is None else b.double())
                    got = few_rows_linear.product(x, panels, b, out_features)
                    assert got.shape == (rows, out_features) and got.dtype == torch.float32
                    torch.testing.assert_close(got.double(), expected, rtol=1e-5, atol=1e-5 * in_features ** 0.5)
            # into a buffer larger than the result (the lean search's logits): the result views it
            buffer = torch.full((30 * out_features + 3,), math.nan)
            for rows in (30, 9, 1):
                x = torch.randn(rows, in_features, generator=g)
                got = few_rows_linear.bound_product(panels, bias, out_features)(x, buffer)
                assert got.shape == (rows, out_features) and got.data_ptr() == buffer.data_ptr()
                torch.testing.assert_close(got.double(), F.linear(x.double(), weight.double(), bias.double()),
                                           rtol=1e-5, atol=1e-5 * in_features ** 0.5)
    finally:
        torch.set_num_threads(previous)


def _packed_layer(monkeypatch, max_rows):
    """A packed Linear(32, 40) with the kernel up to `max_rows` rows (MKL's rules off), and the list
    that records the row counts reaching the kernel."""
    monkeypatch.setattr(onednn_linear, "MKL_AT_FULL_SPEED", False)
    monkeypatch.setattr(onednn_linear, "KERNEL_MAX_ROWS", max_rows)
    lin = torch.nn.Linear(32, 40)
    onednn_linear.use_onednn_linears_(lin, pack=True)
    used = []
    record_kernel_rows(monkeypatch, lambda x2: used.append(x2.size(0)))
    return lin, used


def _assert_products_equal_f_linear(lin, row_counts):
    product = decoding_linear.decoding_product(lin)
    for rows in row_counts:
        x = torch.randn(rows, 32)
        torch.testing.assert_close(product(x), F.linear(x, lin.weight, lin.bias), rtol=1e-5, atol=1e-5)


@needs_kernel
@pytest.mark.skipif(not onednn_linear.onednn_available(), reason="oneDNN is not available")
@pytest.mark.parametrize("every_row_count", [False, True])
def test_decoding_products_take_the_kernel_up_to_max_rows_and_follow_a_changed_weight(monkeypatch, every_row_count):
    lin, used = _packed_layer(monkeypatch, math.inf if every_row_count else few_rows_linear.MAX_ROWS)
    with torch.inference_mode():
        _assert_products_equal_f_linear(lin, (1, 4, 8, 9, 64))
        assert used == ([1, 4, 8, 9, 64] if every_row_count else [1, 4, 8])
        lin.weight.mul_(-2.0)  # load_state_dict and in-place ops on the parameter: the panels are re-made
        _assert_products_equal_f_linear(lin, (4,))  # for the next search, which asks decoding_product again
        x = torch.randn(4, 32)
        torch.testing.assert_close(lin(x), F.linear(x, lin.weight, lin.bias), rtol=1e-5, atol=1e-5)  # and linear()
    assert set(lin.packed.copies) == ({"panels"} if every_row_count else {"panels", "oneDNN"})


@needs_kernel
@pytest.mark.skipif(not onednn_linear.onednn_available(), reason="oneDNN is not available")
@pytest.mark.parametrize("capability, intel, max_rows", [("AVX2", False, 32), ("AVX512", True, math.inf),
                                                        ("AVX512", False, math.inf), ("DEFAULT", False, 8)])
def test_the_kernel_takes_up_to_32_rows_on_avx2_cpus_and_every_row_count_on_avx512_cpus(
        monkeypatch, capability, intel, max_rows):
    """On an AVX2 CPU (4 rows a pass; AMD EPYC Zen 3) the kernel kept up with oneDNN's packed weights
    up to 32 rows; on an AVX-512 CPU (four panels a pass past 8 rows) the libraries are no faster at any
    row count, Intel's MKL included; elsewhere 8 rows, one pass (onednn_linear._kernel_max_rows)."""
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: capability)
    monkeypatch.setattr(onednn_linear, "MKL_AT_FULL_SPEED", intel)
    monkeypatch.setattr(onednn_linear, "MKL_FOR_FEW_ROWS", capability == "AVX2")
    monkeypatch.setattr(onednn_linear, "KERNEL_MAX_ROWS", onednn_linear._kernel_max_rows())
    # The build's log line says so, with MKL's layouts where they come next (onednn_linear._mkl_layout).
    summary = onednn_linear.backend_summary()
    assert (f"up to {max_rows} rows by the few-row kernel" in summary if max_rows != math.inf
            else "decoding on CPU: the few-row kernel where a C compiler builds it, else" in summary)
    assert ("MKL against small weights below 128 rows" in summary) == intel
    assert ("else MKL against small weights at up to 8 rows" in summary) == (capability == "AVX2")
    lin, used = _packed_layer(monkeypatch, onednn_linear.KERNEL_MAX_ROWS)
    with torch.inference_mode():
        _assert_products_equal_f_linear(lin, (8, 9, 32, 33))
    assert used == [rows for rows in (8, 9, 32, 33) if rows <= max_rows]


@pytest.mark.skipif(not onednn_linear.onednn_available(), reason="oneDNN is not available")
@pytest.mark.parametrize("compiler, message", [("no-such-compiler-here", "no C compiler 'no-such-compiler-here'"),
                                               ("false", "false -O3")])
def test_a_kernel_that_cannot_be_built_leaves_one_log_line_and_onednn(monkeypatch, caplog, compiler, message):
    monkeypatch.setenv("CC", compiler)
    monkeypatch.setattr(few_rows_linear, "_tried", False)
    monkeypatch.setattr(few_rows_linear, "_kernel", None)
    monkeypatch.setattr(few_rows_linear, "_kernel_bf16", None)
    lin = torch.nn.Linear(8, 24)
    with caplog.at_level(logging.WARNING, logger=few_rows_linear.__name__):
        onednn_linear.use_onednn_linears_(lin, pack=True)  # builds the kernel now, once
        x = torch.randn(4, 8)
        with torch.inference_mode():
            for _ in range(3):
                torch.testing.assert_close(lin(x), F.linear(x, lin.weight, lin.bias), rtol=1e-5, atol=1e-5)
    lines = [r.getMessage() for r in caplog.records if r.name == few_rows_linear.__name__]
    assert len(lines) == 1 and message in lines[0] and "fall back to oneDNN or MKL" in lines[0], lines
    assert not few_rows_linear.kernel_available()
    assert lin.packed is None or "panels" not in lin.packed.copies


@needs_kernel
@pytest.mark.skipif(not onednn_linear.onednn_available(), reason="oneDNN is not available")
def test_a_packed_bfloat16_layer_takes_the_bfloat16_kernel_where_the_cpu_has_avx512_bf16(monkeypatch):
    """Float64 reference on the same bfloat16 inputs: sums within float32 rounding, one bfloat16
    rounding of the result (relative 2^-8), as torch's bfloat16 linear; odd K stays on F.linear."""
    if not few_rows_linear.supports(torch.bfloat16, 64):
        pytest.skip("no AVX-512 bf16 here: bfloat16 products stay on F.linear")
    used = []
    record_kernel_rows(monkeypatch, lambda x2: used.append(x2.dtype))
    g = torch.Generator().manual_seed(1)
    for in_features, out_features in ((64, 40), (1024, 17), (7, 24)):
        lin = onednn_linear.use_onednn_linears_(torch.nn.Linear(in_features, out_features), pack=True).bfloat16()
        for rows in (1, 4, 8, 9, 33):
            x = torch.randn(rows, in_features, generator=g).bfloat16()
            with torch.inference_mode():
                got = lin(x)
            assert got.dtype == torch.bfloat16 and got.shape == (rows, out_features)
            expected = F.linear(x.double(), lin.weight.double(), lin.bias.double())
            torch.testing.assert_close(got.double(), expected, rtol=2 ** -8, atol=1e-3)
        assert (torch.bfloat16 in used) == (in_features % 2 == 0), in_features
        used.clear()


@needs_kernel
@pytest.mark.skipif(not onednn_linear.onednn_available(), reason="oneDNN is not available")
@pytest.mark.parametrize("amx", [True, False])
def test_bfloat16_products_leave_the_kernel_past_8_rows_where_the_cpu_has_amx(monkeypatch, amx):
    """With AMX, torch's bfloat16 F.linear (oneDNN on its tiles) beats the kernel from a few rows up;
    without it the bfloat16 kernel takes the rows the float32 one takes (onednn_linear's
    _bf16_kernel_max_rows)."""
    if not few_rows_linear.supports(torch.bfloat16, 64):
        pytest.skip("no AVX-512 bf16 here: bfloat16 products stay on F.linear")
    flags = "avx512f avx512_bf16" + (" amx_bf16 amx_tile" if amx else "")
    monkeypatch.setattr(onednn_linear, "cpu_fields", lambda: {"flags": flags})
    monkeypatch.setattr(onednn_linear, "KERNEL_MAX_ROWS", math.inf)  # as on every AVX-512 CPU
    monkeypatch.setattr(onednn_linear, "BF16_KERNEL_MAX_ROWS", onednn_linear._bf16_kernel_max_rows())
    used = []
    record_kernel_rows(monkeypatch, lambda x2: used.append(x2.size(0)))
    lin = onednn_linear.use_onednn_linears_(torch.nn.Linear(64, 40), pack=True).bfloat16()
    g = torch.Generator().manual_seed(2)
    for rows in (1, 8, 9, 64):
        x = torch.randn(rows, 64, generator=g).bfloat16()
        with torch.inference_mode():
            got = lin(x)
        expected = F.linear(x.double(), lin.weight.double(), lin.bias.double())
        torch.testing.assert_close(got.double(), expected, rtol=2 ** -8, atol=1e-3)
    assert used == ([1, 8] if amx else [1, 8, 9, 64])
