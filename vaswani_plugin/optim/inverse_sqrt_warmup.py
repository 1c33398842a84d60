"""`--lr-scheduler inverse_sqrt_warmup`: the learning-rate schedule of §5.3 (Eq. 3).

    lrate = lr_scale * d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5)

Linear warmup for `warmup_steps`, then decay with the inverse square root of the step. `step` is
the 1-based number of the update the rate is used for: the first update runs at lrate(1), not at 0
(fairseq's own `inverse_sqrt` spends its first update at the warmup-initial rate).

With `--lr-as-peak` the same curve is scaled so that it peaks at fairseq's `--lr` at the end of
warmup: lrate = lr * sqrt(warmup_steps) * min(step^-0.5, step * warmup_steps^-1.5).

The rate is a function of the update count alone, and fairseq stores that count in checkpoints, so a
resumed run continues the curve where it stopped.
"""
import logging
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import List, Optional

from fairseq.dataclass import FairseqDataclass
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
    model_d_model: int = II("model.d_model")
    lr: List[float] = II("optimization.lr")


@register_lr_scheduler("inverse_sqrt_warmup", dataclass=InverseSqrtWarmupConfig)
class InverseSqrtWarmupSchedule(FairseqLRScheduler):
    def __init__(self, cfg: InverseSqrtWarmupConfig, optimizer):
        super().__init__(cfg, optimizer)
        if cfg.warmup_updates < 1:
            raise ConfigError(f"--warmup-updates must be at least 1, got {cfg.warmup_updates}")
        if cfg.lr_as_peak:
            if isinstance(cfg.lr, Collection) and len(cfg.lr) > 1:
                raise ConfigError(f"--lr takes one value with --lr-as-peak, got {list(cfg.lr)}")
            peak = cfg.lr[0] if isinstance(cfg.lr, Collection) else cfg.lr
            self.scale = peak * cfg.warmup_updates ** 0.5
        else:
            if cfg.lr_scale <= 0:
                raise ConfigError(f"--lr-scale must be positive, got {cfg.lr_scale}")
            d_model = cfg.lr_d_model or cfg.model_d_model
            self.scale = paper_scale(d_model, cfg.lr_scale)
        logger.info(
            "inverse_sqrt_warmup: lr = %.4g * min(step^-0.5, step * %d^-1.5), peak %.3e at update %d",
            self.scale, cfg.warmup_updates, self.lr_at(cfg.warmup_updates), cfg.warmup_updates,
        )
        self.step_update(0)

    def lr_at(self, step: int) -> float:
        return inverse_sqrt_warmup_lr(step, self.cfg.warmup_updates, self.scale)

    def step_update(self, num_updates):
        """Called by fairseq after `num_updates` updates: set the rate for the next one."""
        lr = self.lr_at(num_updates + 1)
        self.optimizer.set_lr(lr)
        return lr
