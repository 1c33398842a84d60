"""`--lr-scheduler inverse_sqrt_warmup`: the learning-rate schedule of §5.3 (Eq. 3).

    lrate = lr_scale * d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5)

Linear warmup for `warmup_steps`, then decay with the inverse square root of the step. `step` is
the 1-based number of the update the rate is used for: the first update runs at lrate(1), not at 0
(fairseq's own `inverse_sqrt` spends its first update at the warmup-initial rate).

With `--lr-as-peak` the same curve is scaled so that it peaks at fairseq's `--lr` at the end of
warmup: lrate = lr * sqrt(warmup_steps) * min(step^-0.5, step * warmup_steps^-1.5). There
`--warmup-init-lr` has fairseq's `inverse_sqrt` meaning: the warmup rises linearly from it (at
step 0) to the peak instead of from 0. In the paper's mode neither `--lr` nor `--warmup-init-lr` is
used (Eq. 3 has no such term), and the log says so once when either is given.

The rate is a function of the update count alone, and fairseq stores that count in checkpoints, so a
resumed run continues the curve where it stopped.
"""
import logging
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import List, Optional

from fairseq.dataclass import FairseqDataclass
from fairseq.dataclass.configs import OptimizationConfig
from fairseq.optim.lr_scheduler import FairseqLRScheduler, register_lr_scheduler
from omegaconf import II

from ..errors import ConfigError

logger = logging.getLogger(__name__)


def inverse_sqrt_warmup_lr(step: int, warmup_steps: int, scale: float) -> float:
    """scale * min(step^-0.5, step * warmup_steps^-1.5), the shape of Eq. 3."""
    return scale * min(step ** -0.5, step * warmup_steps ** -1.5)


def paper_scale(d_model: int, lr_scale: float = 1.0) -> float:
    """Eq. 3's factor in front of the min: lr_scale * d_model^-0.5."""
    return lr_scale * d_model ** -0.5


@dataclass
class InverseSqrtWarmupConfig(FairseqDataclass):
    warmup_updates: int = field(default=4000, metadata={"help": "warmup_steps of Eq. 3 (§5.3: 4000)"})
    lr_scale: float = field(default=1.0, metadata={"help": "factor in front of Eq. 3 (the paper: 1.0)"})
    lr_d_model: Optional[int] = field(
        default=None, metadata={"help": "d_model in Eq. 3; defaults to the model's --d-model"}
    )
    lr_as_peak: bool = field(
        default=False,
        metadata={"help": "ignore Eq. 3's factor and scale the curve so it peaks at --lr at the end of "
                          "warmup (fairseq's convention); without this flag --lr is not used"},
    )
    warmup_init_lr: Optional[float] = field(
        default=None,
        metadata={"help": "with --lr-as-peak, the warmup rises linearly from this rate to --lr, as in fairseq's "
                          "inverse_sqrt (default 0); not used by Eq. 3"},
    )
    model_d_model: int = II("model.d_model")
    lr: List[float] = II("optimization.lr")


@register_lr_scheduler("inverse_sqrt_warmup", dataclass=InverseSqrtWarmupConfig)
class InverseSqrtWarmupSchedule(FairseqLRScheduler):
    def __init__(self, cfg: InverseSqrtWarmupConfig, optimizer):
        super().__init__(cfg, optimizer)
        if cfg.warmup_updates < 1:
            raise ConfigError(f"--warmup-updates must be at least 1, got {cfg.warmup_updates}")
        lr = list(cfg.lr) if isinstance(cfg.lr, Collection) else [cfg.lr]
        if cfg.warmup_init_lr is not None and cfg.warmup_init_lr < 0:
            raise ConfigError(f"--warmup-init-lr must be >= 0, got {cfg.warmup_init_lr}")
        self.init_lr = 0.0
        if cfg.lr_as_peak:
            if len(lr) > 1:
                raise ConfigError(f"--lr takes one value with --lr-as-peak, got {lr}")
            self.scale = lr[0] * cfg.warmup_updates ** 0.5
            self.init_lr = cfg.warmup_init_lr or 0.0
        else:
            if cfg.lr_scale <= 0:
                raise ConfigError(f"--lr-scale must be positive, got {cfg.lr_scale}")
            d_model = cfg.lr_d_model or cfg.model_d_model
            self.scale = paper_scale(d_model, cfg.lr_scale)
            # fairseq's default --lr is all we can tell from an --lr not given
            if lr != list(OptimizationConfig().lr):
                logger.warning("inverse_sqrt_warmup: --lr %s is not used: the rate is Eq. 3's (add --lr-as-peak "
                               "for a curve that peaks at --lr)", ",".join(map(str, lr)))
            if cfg.warmup_init_lr is not None:
                logger.warning("inverse_sqrt_warmup: --warmup-init-lr %g does not apply: Eq. 3 warms up from "
                               "lrate(1) (add --lr-as-peak for fairseq's linear warmup from it)", cfg.warmup_init_lr)
        logger.info(
            "inverse_sqrt_warmup: lr = %.4g * min(step^-0.5, step * %d^-1.5)%s, peak %.3e at update %d",
            self.scale, cfg.warmup_updates, f" + {self.init_lr:g} * (1 - step / {cfg.warmup_updates}) in the warmup"
            if self.init_lr else "", self.lr_at(cfg.warmup_updates), cfg.warmup_updates,
        )
        self.step_update(0)

    def lr_at(self, step: int) -> float:
        lr = inverse_sqrt_warmup_lr(step, self.cfg.warmup_updates, self.scale)
        if step < self.cfg.warmup_updates:  # the line from init_lr (step 0) to the peak, not from 0
            lr += self.init_lr * (1.0 - step / self.cfg.warmup_updates)
        return lr

    def step_update(self, num_updates):
        """Called by fairseq after `num_updates` updates: set the rate for the next one."""
        lr = self.lr_at(num_updates + 1)
        self.optimizer.set_lr(lr)
        return lr
