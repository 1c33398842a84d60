"""fairseq_fixes/fused_adam_cpu.py: fairseq's `Adam` on float32 CPU parameters through torch's fused
kernel. The reference is fairseq's own loop (the function the fix wraps) and Adam's formula as
fairseq writes it, run in float64: the fused update must sit as close to the formula as fairseq's
loop does, keep fairseq's state layout, and leave every case it does not fuse to fairseq."""
import copy
import math

import pytest
import torch
from fairseq.optim.adam import Adam

from vaswani_plugin.fairseq_fixes import fused_adam_cpu

SHAPES = [(40, 24), (24,), (7, 3, 5)]
HYPER = dict(lr=2e-3, betas=(0.9, 0.98), eps=1e-6)


def _params(dtype=torch.float32):
    torch.manual_seed(1)
    return [torch.nn.Parameter(torch.randn(shape, dtype=torch.float64).to(dtype)) for shape in SHAPES]


def _formula_step(p, g, m, v, t, lr, betas, eps, weight_decay):
    """One Adam update in float64, in place, as fairseq's adam.py states it (decoupled weight decay)."""
    b1, b2 = betas
    m.mul_(b1).add_(g, alpha=1 - b1)
    v.mul_(b2).add_(g * g, alpha=1 - b2)
    p.mul_(1 - lr * weight_decay)
    p.sub_(lr * math.sqrt(1 - b2 ** t) / (1 - b1 ** t) * m / (v.sqrt() + eps))


@pytest.mark.parametrize("weight_decay", [0.0, 0.01])
def test_the_fused_update_is_adams_formula_as_closely_as_fairseqs_loop(weight_decay):
    fused, loop = _params(), _params()
    exact = [p.detach().double() for p in _params()]
    moments = [(torch.zeros_like(p), torch.zeros_like(p)) for p in exact]
    fused_opt = Adam(fused, weight_decay=weight_decay, **HYPER)
    loop_opt = Adam(loop, weight_decay=weight_decay, **HYPER)
    for t in range(1, 31):
        # gradients small enough that epsilon moves the update (sqrt(v) ~ 1e-4 against eps 1e-6)
        grads = [1e-4 * torch.randn(shape, dtype=torch.float64) for shape in SHAPES]
        for p, q, g in zip(fused, loop, grads):
            p.grad, q.grad = g.float(), g.float()
        fused_opt.step()
        fused_adam_cpu._fairseq_step(loop_opt)
        for p, g, (m, v) in zip(exact, grads, moments):
            _formula_step(p, g, m, v, t, weight_decay=weight_decay, **HYPER)
    loop_error = max((q.double() - e).abs().max().item() for q, e in zip(loop, exact))
    fused_error = max((p.double() - e).abs().max().item() for p, e in zip(fused, exact))
    assert 0 < loop_error < 1e-5  # float32 rounding over 30 updates
    assert fused_error <= 2 * loop_error
    for p, q in zip(fused, loop):  # the moments too, and fairseq's state layout
        s, r = fused_opt.state[p], loop_opt.state[q]
        assert s.keys() == r.keys() == {"step", "exp_avg", "exp_avg_sq"} and s["step"] == r["step"] == 30
        torch.testing.assert_close(s["exp_avg"], r["exp_avg"], rtol=1e-5, atol=1e-7)
        torch.testing.assert_close(s["exp_avg_sq"], r["exp_avg_sq"], rtol=1e-5, atol=1e-9)


def test_parameters_without_a_gradient_keep_their_step_and_the_others_their_bias_correction():
    """fairseq skips a parameter whose gradient is None (its step count falls behind): the fused
    path groups parameters by step count, each group with its own bias corrections."""
    fused, loop = _params(), _params()
    fused_opt, loop_opt = Adam(fused, **HYPER), Adam(loop, **HYPER)
    for t in range(6):
        for i, (p, q) in enumerate(zip(fused, loop)):
            g = None if (i == 1 and t % 2) else torch.randn(p.shape)
            p.grad, q.grad = g, (None if g is None else g.clone())
        fused_opt.step()
        fused_adam_cpu._fairseq_step(loop_opt)
    assert [fused_opt.state[p]["step"] for p in fused] == [loop_opt.state[q]["step"] for q in loop] == [6, 3, 6]
    for p, q in zip(fused, loop):
        torch.testing.assert_close(p.detach(), q.detach(), rtol=1e-6, atol=1e-6)


def test_a_state_written_by_either_path_resumes_in_the_other():
    fused, loop = _params(), _params()
    fused_opt, loop_opt = Adam(fused, **HYPER), Adam(loop, **HYPER)
    for p, q in zip(fused, loop):
        p.grad = torch.randn(p.shape)
        q.grad = p.grad.clone()
    fused_opt.step()
    fused_adam_cpu._fairseq_step(loop_opt)
    # a copy, as a checkpoint is: a loaded state keeps the very tensors it is given
    fused_opt.load_state_dict(copy.deepcopy(loop_opt.state_dict()))  # fairseq's state into the fused path ...
    loop_opt.load_state_dict(copy.deepcopy(fused_opt.state_dict()))  # ... and back
    fused_opt.step()
    fused_adam_cpu._fairseq_step(loop_opt)
    for p, q in zip(fused, loop):
        assert fused_opt.state[p]["step"] == loop_opt.state[q]["step"] == 2
        torch.testing.assert_close(p.detach(), q.detach(), rtol=1e-6, atol=1e-6)


def test_the_moments_exist_from_the_start_as_fairseqs_first_update_would_make_them():
    """Allocated when the optimizer is built (module docstring: the heap's layout), they are the
    zeros and step 0 fairseq's loop creates at its first update: from there, its updates are equal."""
    eager, lazy = _params(), _params()
    eager_opt, lazy_opt = Adam(eager, **HYPER), Adam(lazy, **HYPER)
    for p in eager:
        state = eager_opt.state[p]
        assert state["step"] == 0 and state["exp_avg"].shape == state["exp_avg_sq"].shape == p.shape
        assert not state["exp_avg"].any() and not state["exp_avg_sq"].any()
    lazy_opt.state.clear()  # fairseq's own start: no state before the first update
    for t in range(3):
        for p, q in zip(eager, lazy):
            p.grad = torch.randn(p.shape)
            q.grad = p.grad.clone()
        fused_adam_cpu._fairseq_step(eager_opt)
        fused_adam_cpu._fairseq_step(lazy_opt)
    for p, q in zip(eager, lazy):
        assert torch.equal(p, q)
        assert all(torch.equal(torch.as_tensor(eager_opt.state[p][k]), torch.as_tensor(lazy_opt.state[q][k]))
                   for k in ("step", "exp_avg", "exp_avg_sq"))


@pytest.mark.parametrize("case", ["amsgrad", "bfloat16 parameters"])
def test_what_the_kernel_does_not_take_runs_fairseqs_loop(case, monkeypatch):
    amsgrad = case == "amsgrad"
    params = _params(torch.float32 if amsgrad else torch.bfloat16)
    for p in params:
        p.grad = torch.randn(p.shape).to(p.dtype)
    opt = Adam(params, amsgrad=amsgrad, **HYPER)
    assert not opt.state  # fairseq's loop makes the state, at the first update
    called = []
    monkeypatch.setattr(fused_adam_cpu, "_fused_group_step", lambda *a: called.append(a))
    opt.step()
    assert not called and all(opt.state[p]["step"] == 1 for p in params)
    assert ("max_exp_avg_sq" in opt.state[params[0]]) == amsgrad


def test_fairseqs_adam_optimizer_takes_the_fused_step_once_the_plugin_is_imported(monkeypatch):
    """What fairseq-train builds for `--optimizer adam` on a CPU (FairseqAdam, its inner Adam)."""
    import vaswani_plugin  # noqa: F401  (applies the fixes)
    from fairseq import optim, options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    flags = ["/nonexistent-data", "--task", "translation", "--arch", "transformer", "--optimizer", "adam",
             "--adam-betas", "(0.9, 0.98)", "--lr", "1e-3", "--cpu"]
    cfg = convert_namespace_to_omegaconf(options.parse_args_and_arch(options.get_training_parser(), flags))
    params = _params()
    for p in params:
        p.grad = torch.randn(p.shape)
    optimizer = optim.build_optimizer(cfg.optimizer, params)
    fused = []
    monkeypatch.setattr(fused_adam_cpu, "_fused_group_step",
                        lambda state, group: fused.append(len(group["params"])))
    optimizer.step()
    assert fused == [len(SHAPES)]


def test_without_a_cpu_fused_kernel_fairseqs_loop_stays(monkeypatch):
    """torch before 2.4 has `_fused_adamw_` for CUDA only: the probe says no, and the fix is not applied."""
    assert fused_adam_cpu.kernel_runs_here()  # the torch this project installs (2.13)

    def cuda_only(*args, **kwargs):
        raise RuntimeError("_fused_adamw_ is not implemented for CPU tensors")

    monkeypatch.setattr(torch, "_fused_adamw_", cuda_only)
    assert not fused_adam_cpu.kernel_runs_here()
