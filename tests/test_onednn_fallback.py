"""The oneDNN linear backend (modules/onednn_linear.py) reaches oneDNN through private torch ops.
When one is missing, or fails the first time it is used, one log line says so and every linear layer
computes with F.linear; modules that are not on the CPU are never wrapped (issue 16)."""
import inspect
import logging
import os
import re
import subprocess
import sys
import textwrap
import types

import pytest
import torch
import torch.nn.functional as F

from helpers import ROOT
from vaswani_plugin.modules import onednn_linear

MISSING_OP = textwrap.dedent("""
    import logging, types
    import torch
    import torch.nn.functional as F
    real = torch.ops.mkldnn
    torch.ops.mkldnn = types.SimpleNamespace(_linear_pointwise=real._linear_pointwise)  # no _reorder_linear_weight
    logging.basicConfig(level=logging.INFO, format="LOG %(name)s: %(message)s")
    from conftest import FakeTask, make_dictionary
    from helpers import build_from_cli
    model = build_from_cli("vaswani_transformer", FakeTask(make_dictionary(10)), "--encoder-layers", "1",
                           "--decoder-layers", "1", "--d-model", "8", "--d-ff", "16", "--attention-heads", "2")
    model.decoder.make_generation_fast_()
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    print("types", sorted({type(m).__name__ for m in linears}))
    x = torch.randn(3, 8)
    print("equal", all(torch.equal(m(x), F.linear(x, m.weight, m.bias)) for m in linears if m.in_features == 8))
""")


def test_every_private_op_the_file_calls_is_looked_up_at_import():
    source = inspect.getsource(onednn_linear)
    assert not re.findall(r"torch\.ops\.mkldnn\.\w+\(", source)  # every call goes through _call
    assert set(re.findall(r'_call\("(\w+)"', source)) == set(onednn_linear._PRIVATE_OPS)


def test_a_missing_private_op_is_detected_at_import_and_logged_once():
    if not torch.backends.mkldnn.is_available():
        pytest.skip("this torch has no oneDNN at all")
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join([ROOT, os.path.join(ROOT, "tests")]))
    proc = subprocess.run([sys.executable, "-c", MISSING_OP], capture_output=True, text=True, env=env, cwd=ROOT,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    logged = [line for line in proc.stderr.splitlines() if "oneDNN" in line]
    assert logged == ["LOG vaswani_plugin.modules.onednn_linear: oneDNN linear layers off (torch.ops.mkldnn has no "
                      "_reorder_linear_weight): linear layers use F.linear"]
    assert "types ['Linear']" in proc.stdout  # nothing wrapped
    assert "equal True" in proc.stdout


def _failing_namespace():
    def fails(*args):
        raise RuntimeError("could not create a primitive")
    return types.SimpleNamespace(_linear_pointwise=fails, _reorder_linear_weight=fails)


@pytest.mark.parametrize("mode", ["training", "decoding", "packed", "matmul_nt"])
def test_an_op_that_fails_on_first_use_falls_back_to_f_linear_with_one_log_line(monkeypatch, caplog, mode):
    monkeypatch.setattr(onednn_linear, "_AVAILABLE", True)
    monkeypatch.setattr(onednn_linear, "MKL_AT_FULL_SPEED", False)  # training's products too, on any CPU
    monkeypatch.setattr(onednn_linear, "MKL_FOR_FEW_ROWS", False)  # and decoding's 4 rows
    monkeypatch.setattr(onednn_linear.few_rows_linear, "kernel_available", lambda: False)  # oneDNN's, not the kernel's
    monkeypatch.setattr(onednn_linear, "_WORKED", set())
    monkeypatch.setattr(torch.ops, "mkldnn", _failing_namespace())
    lin = torch.nn.Linear(8, 5)
    onednn_linear.use_onednn_linears_(lin, pack=mode == "packed")
    assert type(lin) is onednn_linear.OneDNNLinear
    x = torch.randn(4, 8, requires_grad=mode == "training")
    with caplog.at_level(logging.WARNING, logger=onednn_linear.__name__), torch.set_grad_enabled(mode == "training"):
        for _ in range(3):
            if mode == "matmul_nt":
                torch.testing.assert_close(onednn_linear.matmul_nt(x, lin.weight), x @ lin.weight.t(), rtol=0, atol=0)
            else:
                torch.testing.assert_close(lin(x), F.linear(x, lin.weight, lin.bias), rtol=0, atol=0)
    op = "_reorder_linear_weight" if mode == "packed" else "_linear_pointwise"  # the first one each mode calls
    assert [r.getMessage() for r in caplog.records] == [
        f"oneDNN linear layers off (torch.ops.mkldnn.{op} failed on first use: RuntimeError: could not "
        "create a primitive): linear layers use F.linear"]
    assert not onednn_linear.onednn_available()


def test_an_op_that_worked_once_raises_its_later_errors(monkeypatch):
    """A failure after a first success is a real error (a bad shape, say), not a missing backend."""
    monkeypatch.setattr(onednn_linear, "_AVAILABLE", True)
    monkeypatch.setattr(onednn_linear, "_WORKED", {"_linear_pointwise", "_reorder_linear_weight"})
    monkeypatch.setattr(torch.ops, "mkldnn", _failing_namespace())
    with pytest.raises(RuntimeError, match="could not create a primitive"):
        onednn_linear.linear(torch.randn(16, 8), torch.randn(5, 8))  # rows that oneDNN takes on any CPU
    assert onednn_linear.onednn_available()


def test_modules_off_the_cpu_stay_unwrapped(monkeypatch):
    monkeypatch.setattr(onednn_linear, "_AVAILABLE", True)
    lin = torch.nn.Linear(8, 5, device="meta")  # stands for a CUDA module: any device but the CPU
    onednn_linear.use_onednn_linears_(lin, pack=True)
    assert type(lin) is torch.nn.Linear
    model = onednn_linear.use_onednn_linears_(torch.nn.Sequential(torch.nn.Linear(8, 5)), pack=True)
    assert type(model[0]) is onednn_linear.OneDNNLinear
    model.to("meta")  # built on the CPU, then moved (fairseq's Trainer moves the model to the GPU)
    assert type(model[0]) is torch.nn.Linear and "packed" not in vars(model[0])
    assert model[0].weight.device.type == "meta"


@pytest.mark.parametrize("vendor, mkl, expected", [("GenuineIntel", True, True), ("AuthenticAMD", True, False),
                                                   ("GenuineIntel", False, False), ("", True, False)])
def test_mkl_runs_at_full_speed_only_on_its_own_vendors_cpu(monkeypatch, vendor, mkl, expected):
    """MKL's sgemm is slow off Intel CPUs; on them it is as fast as oneDNN and needs no transposed copies."""
    monkeypatch.setattr(onednn_linear, "_cpu_vendor", lambda: vendor)
    monkeypatch.setattr(torch.backends.mkl, "is_available", lambda: mkl)
    assert onednn_linear._mkl_at_full_speed() is expected


def test_the_cpu_vendor_is_read_from_proc_cpuinfo():
    if not os.path.exists("/proc/cpuinfo"):
        pytest.skip("no /proc/cpuinfo here")
    with open("/proc/cpuinfo") as f:
        vendors = {line.split(":")[1].strip() for line in f if line.startswith("vendor_id")}
    assert vendors == {onednn_linear._cpu_vendor()} or (not vendors and onednn_linear._cpu_vendor() == "")


def test_where_mkl_runs_at_full_speed_training_products_are_f_linear_and_decoding_stays_packed(monkeypatch):
    monkeypatch.setattr(onednn_linear, "MKL_AT_FULL_SPEED", True)
    # 128 rows take oneDNN where the kernel takes at most 8
    monkeypatch.setattr(onednn_linear, "KERNEL_MAX_ROWS", onednn_linear.few_rows_linear.MAX_ROWS)
    lin = torch.nn.Linear(8, 5)
    onednn_linear.use_onednn_linears_(lin)
    x = torch.randn(4, 8, requires_grad=True)
    calls = []
    real_call = onednn_linear._call
    monkeypatch.setattr(onednn_linear, "_call", lambda name, *args: calls.append(name) or real_call(name, *args))
    assert torch.equal(lin(x), F.linear(x, lin.weight, lin.bias))  # bitwise: the same library call
    a, b = torch.randn(6, 8), torch.randn(5, 8)
    assert torch.equal(onednn_linear.matmul_nt(a, b), a @ b.t())
    assert calls == []
    if onednn_linear.onednn_available():
        onednn_linear.use_onednn_linears_(lin, pack=True)
        rows = torch.randn(128, 8)  # decoding's batch of hypotheses, enough for oneDNN against a small weight
        with torch.inference_mode():
            torch.testing.assert_close(lin(rows), F.linear(rows, lin.weight, lin.bias))
        assert calls == ["_reorder_linear_weight", "_linear_pointwise"]


@pytest.mark.skipif(not onednn_linear.onednn_available(), reason="oneDNN is not available")
@pytest.mark.parametrize("mkl_at_full_speed, mkl_for_few_rows, pack, rows, out_features, library", [
    (True, False, True, 4, 8, "transposed"),  # a small weight, MKL at full speed: through the transposed copy
    (True, False, True, 127, 2 ** 15, "transposed"),  # 2^15 x 8 = 2^18 elements: still small; fewer than 128 rows
    (True, False, True, 128, 8, "oneDNN"),  # enough rows for oneDNN's packed layout
    (True, False, True, 4, 2 ** 15 + 1, "oneDNN"),  # a weight of more than 2^18 elements (the output projection)
    (True, False, False, 15, 8, "stored"),  # not packed (no transposed copy): MKL for fewer than 16 rows only
    (True, False, False, 16, 8, "oneDNN"),
    (False, False, True, 4, 8, "oneDNN"),  # MKL's slow path (off Intel, AVX-512): oneDNN everywhere
    (False, True, True, 8, 8, "weight_left"),  # an AVX2 CPU: MKL as W xᵀ, at up to 8 rows
    (False, True, False, 1, 2 ** 15, "weight_left"),
    (False, True, True, 9, 8, "oneDNN"),
    (False, True, True, 4, 2 ** 15 + 1, "oneDNN"),  # the output projection stays on oneDNN
])
def test_decoding_takes_mkl_against_a_small_weight(monkeypatch, mkl_at_full_speed, mkl_for_few_rows, pack, rows,
                                                   out_features, library):
    monkeypatch.setattr(onednn_linear, "MKL_AT_FULL_SPEED", mkl_at_full_speed)
    monkeypatch.setattr(onednn_linear, "MKL_FOR_FEW_ROWS", mkl_for_few_rows)
    monkeypatch.setattr(onednn_linear.few_rows_linear, "kernel_available", lambda: False)  # the rule without the kernel
    lin = onednn_linear.use_onednn_linears_(torch.nn.Linear(8, out_features), pack=pack)
    calls = []
    real_call = onednn_linear._call
    monkeypatch.setattr(onednn_linear, "_call", lambda name, *args: calls.append(name) or real_call(name, *args))
    x = torch.randn(rows, 8)
    weight_left = []  # addmm calls whose left operand is the weight
    real_addmm = torch.addmm
    with monkeypatch.context() as patch, torch.inference_mode():
        patch.setattr(torch, "addmm", lambda *args: weight_left.append(args[1] is lin.weight) or real_addmm(*args))
        out = lin(x)
    expected = F.linear(x, lin.weight, lin.bias)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)
    assert out.is_contiguous()
    if library == "stored":  # bitwise: the very call F.linear makes
        assert torch.equal(out, expected)
    assert any(weight_left) == (library == "weight_left")
    if library == "weight_left":  # without a bias (torch.mm), and a [B, T, d] input keeps its shape
        lin.bias = None
        x3 = x.view(1, rows, 8)
        with torch.inference_mode():
            torch.testing.assert_close(lin(x3), F.linear(x3, lin.weight), rtol=1e-5, atol=1e-5)
    assert ("_linear_pointwise" in calls) == (library == "oneDNN")
    assert ("transposed" in (lin.packed.copies if pack else {})) == (library == "transposed")


@pytest.mark.parametrize("capability, mkl, expected", [("AVX2", True, True), ("AVX512", True, False),
                                                       ("AVX2", False, False), ("DEFAULT", True, False)])
def test_mkl_takes_few_rows_where_the_widest_vectors_are_avx2(monkeypatch, capability, mkl, expected):
    """oneDNN has only AVX2 kernels there too, and its per-call cost shows at a few rows (AMD EPYC Zen 1)."""
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: capability)
    monkeypatch.setattr(torch.backends.mkl, "is_available", lambda: mkl)
    assert onednn_linear._mkl_for_few_rows() is expected


@pytest.mark.skipif(not onednn_linear.onednn_available(), reason="oneDNN is not available")
def test_the_transposed_copy_follows_a_changed_weight_and_leaves_the_parameter_alone(monkeypatch):
    monkeypatch.setattr(onednn_linear, "MKL_AT_FULL_SPEED", True)
    lin = onednn_linear.use_onednn_linears_(torch.nn.Linear(8, 6), pack=True)
    ref = torch.nn.Linear(8, 6)
    ref.load_state_dict(lin.state_dict())
    x = torch.randn(2, 3, 8)  # [B, T, d]: the output keeps the leading dimensions
    with torch.inference_mode():
        torch.testing.assert_close(lin(x), ref(x), rtol=1e-5, atol=1e-5)
        lin.bias = None
        torch.testing.assert_close(lin(x), F.linear(x, ref.weight), rtol=1e-5, atol=1e-5)
    with torch.no_grad():
        lin.weight.mul_(-2.0)  # an in-place op on the parameter (load_state_dict): a new copy
        ref.weight.mul_(-2.0)
    with torch.inference_mode():
        torch.testing.assert_close(lin(x), F.linear(x, ref.weight), rtol=1e-5, atol=1e-5)
    assert lin.weight.stride() == (8, 1) and torch.equal(lin.weight, ref.weight)
