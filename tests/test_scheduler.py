"""`inverse_sqrt_warmup` against Eq. 3 of §5.3, computed here from the formula."""
import pytest
import torch
from fairseq.optim import FairseqOptimizer

from helpers import eq3
from vaswani_plugin.errors import ConfigError
from vaswani_plugin.optim.inverse_sqrt_warmup import InverseSqrtWarmupConfig, InverseSqrtWarmupSchedule


class SGDOptimizer(FairseqOptimizer):
    """The smallest FairseqOptimizer: the scheduler only sets and reads its learning rate."""

    def __init__(self):
        super().__init__(cfg=None)
        self._optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.0)


def make(warmup=4000, d_model=512, **kw):
    cfg = InverseSqrtWarmupConfig(warmup_updates=warmup, model_d_model=d_model, lr=[0.25], **kw)
    opt = SGDOptimizer()
    return InverseSqrtWarmupSchedule(cfg, opt), opt


@pytest.mark.parametrize("step", [1, 4000, 40000])
def test_paper_formula_at_step_1_warmup_and_10x_warmup(step):
    sched, opt = make()
    sched.step_update(step - 1)  # fairseq calls it after step-1 updates, for the step-th update
    assert opt.get_lr() == pytest.approx(eq3(step, 512, 4000), rel=1e-12)


def test_first_update_uses_step_1_and_peak_is_at_warmup():
    sched, opt = make(warmup=10, d_model=64)
    assert opt.get_lr() == pytest.approx(eq3(1, 64, 10))  # set at construction, before any update
    lrs = [sched.step_update(n) for n in range(0, 40)]
    assert max(lrs) == pytest.approx(eq3(10, 64, 10)) and lrs.index(max(lrs)) == 9


def test_lr_scale_and_explicit_d_model():
    sched, opt = make(d_model=512, lr_scale=2.0, lr_d_model=1024)
    assert opt.get_lr() == pytest.approx(2.0 * eq3(1, 1024, 4000))


def test_lr_as_peak_mode_peaks_at_lr():
    sched, opt = make(warmup=100, lr_as_peak=True)
    assert sched.step_update(99) == pytest.approx(0.25)
    assert sched.step_update(399) == pytest.approx(0.25 * (100 / 400) ** 0.5)
    assert sched.step_update(49) == pytest.approx(0.25 * 50 / 100)


def test_state_survives_save_and_load():
    """The rate depends on the update count only; a fresh scheduler told the restored count agrees."""
    sched, opt = make()
    sched.step_update(12345)
    saved = sched.state_dict()
    fresh, fresh_opt = make()
    fresh.load_state_dict(saved)
    fresh.step_update(12345)
    assert fresh_opt.get_lr() == opt.get_lr() == pytest.approx(eq3(12346, 512, 4000))


def test_zero_warmup_is_refused_with_the_flag_named():
    with pytest.raises(ConfigError, match="--warmup-updates must be at least 1"):
        make(warmup=0)


def fairseq_inverse_sqrt(num_updates, peak, warmup, init):
    """fairseq's inverse_sqrt (fairseq/optim/lr_scheduler/inverse_square_root_schedule.py), written out:
    the rate after `num_updates` updates: linear from init to peak, then peak * sqrt(warmup / n)."""
    if num_updates < warmup:
        return init + num_updates * (peak - init) / warmup
    return peak * warmup ** 0.5 * num_updates ** -0.5


@pytest.mark.parametrize("init", [1e-7, 0.01])
def test_warmup_init_lr_with_lr_as_peak_is_fairseqs_linear_warmup(init):
    """Same curve as fairseq's inverse_sqrt at every step, one step on: our step n is its n - 1 (§5.3
    counts from 1; fairseq spends its first update at init)."""
    sched, opt = make(warmup=100, lr_as_peak=True, warmup_init_lr=init)
    for n in (0, 1, 37, 99, 100, 101, 1000):
        assert sched.step_update(n) == pytest.approx(fairseq_inverse_sqrt(n + 1, 0.25, 100, init), rel=1e-12), n


def test_lr_and_warmup_init_lr_in_the_papers_mode_are_said_once_and_unused(caplog):
    with caplog.at_level("WARNING"):
        sched, opt = make(warmup_init_lr=1e-7)  # lr=[0.25] is fairseq's default: not given
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1 and "--warmup-init-lr 1e-07 does not apply" in said[0]
    assert opt.get_lr() == pytest.approx(eq3(1, 512, 4000))
    caplog.clear()
    with caplog.at_level("WARNING"):
        cfg = InverseSqrtWarmupConfig(warmup_updates=4000, model_d_model=512, lr=[5e-4])
        InverseSqrtWarmupSchedule(cfg, SGDOptimizer())
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1 and "--lr 0.0005 is not used" in said[0]


def test_negative_warmup_init_lr_is_refused():
    with pytest.raises(ConfigError, match="--warmup-init-lr must be >= 0"):
        make(lr_as_peak=True, warmup_init_lr=-1.0)
