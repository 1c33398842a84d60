"""`--optimizer adam` on a CPU: fairseq's Adam update in one fused pass per parameter (speed only).

fairseq 0.12's `Adam` (fairseq/optim/adam.py; fairseq-train takes it wherever apex's fused Adam
and CUDA are missing) loops over the parameters in Python, and for each runs seven elementwise
kernels (two for each moment, a square root into a new tensor, the epsilon, the update): seven
passes over every parameter's moments each update, 60M parameters for the base model, 210M for big.
torch's fused Adam kernel (`torch._fused_adamw_`, on CPUs since torch 2.4) reads the parameter, its
gradient and both moments once and writes them once.

Where every parameter of a group is a float32 CPU tensor with a dense float32 gradient and amsgrad
is off (fp32 training; `--fp16` and `--bf16` keep float32 master weights, so there too), the
plugin runs fairseq's update through that kernel; anything else takes fairseq's loop unchanged.
The state is fairseq's (`step` an int, `exp_avg`, `exp_avg_sq` per parameter), so checkpoints are
written and resumed across both paths.

The update is the same formula (Kingma & Ba's Adam with decoupled weight decay, as fairseq writes
it):  p <- p (1 - lr wd) - lr sqrt(1 - b2^t) / (1 - b1^t) m / (sqrt(v) + eps).
torch's kernel adds epsilon after the bias correction, sqrt(v) / sqrt(1 - b2^t) + eps; it is given
eps / sqrt(1 - b2^t), which makes the two equal. Float rounding differs (another order of the same
operations): tests/test_fused_adam.py holds it to fairseq's loop.

The moments of those parameters are allocated when the optimizer is built (zeros, step 0: what
fairseq's loop creates at the first update), not after the first backward; a parameter that never
gets a gradient holds them too, where fairseq's loop would make none. Made there, the 2 x
parameters of state landed in the holes the first step's activations had left, and every later
step's activations then went around them. The big shape's peak RSS in process (AMD EPYC Zen 4,
third step), lazily / allocated first: vaswani_transformer_big 6,589 / 6,320 MB, fairseq's
transformer_vaswani_wmt_en_de_big 9,792 / 9,157 MB; the in-use peak is the same both ways.

A torch whose fused kernel does not run on a CPU (before 2.4) keeps fairseq's loop, with one log
line saying so.
"""
import logging
import math
from collections import defaultdict

import torch
from fairseq.optim import adam as fairseq_adam

logger = logging.getLogger(__name__)
_fairseq_step = fairseq_adam.Adam.step
_fairseq_init = fairseq_adam.Adam.__init__


def kernel_runs_here() -> bool:
    """Whether torch's fused AdamW kernel takes CPU tensors (one update of a 1-element tensor)."""
    one = [torch.zeros(1)]
    try:
        torch._fused_adamw_(one, [torch.ones(1)], [torch.zeros(1)], [torch.zeros(1)], [], [torch.ones(1)], lr=0.1,
                            beta1=0.9, beta2=0.98, weight_decay=0.0, eps=1e-8, amsgrad=False, maximize=False)
    except (AttributeError, RuntimeError, NotImplementedError) as error:
        logger.info("fairseq's Adam keeps its own loop on the CPU: torch's fused kernel is not usable here (%s)",
                    error)
        return False
    return bool(one[0].item() < 0)  # the step moved the parameter against its gradient


def _fusable(group) -> bool:
    """Every parameter with a gradient is float32 on the CPU, its gradient dense float32; no amsgrad."""
    if group.get("amsgrad", False):
        return False
    return all(_float32_on_cpu(p) and p.grad.dtype == torch.float32 and not p.grad.is_sparse
               for p in group["params"] if p.grad is not None)


def _float32_on_cpu(p) -> bool:
    return p.device.type == "cpu" and p.dtype == torch.float32


def _zero_moments(p) -> dict:
    """The state fairseq's loop gives a parameter at its first update."""
    return {"step": 0, "exp_avg": torch.zeros_like(p), "exp_avg_sq": torch.zeros_like(p)}


def __init__(self, params, *args, **kwargs):
    """fairseq's `Adam.__init__`, then the zero moments of every float32 CPU parameter (module
    docstring); amsgrad groups are left to fairseq's loop."""
    _fairseq_init(self, params, *args, **kwargs)
    for group in self.param_groups:
        if not group.get("amsgrad", False):
            for p in filter(_float32_on_cpu, group["params"]):
                self.state[p].update(_zero_moments(p))


def _fused_group_step(state, group) -> None:
    """fairseq's update of one group, fused; parameters grouped by their step count (usually one)."""
    beta1, beta2 = group["betas"]
    by_step = defaultdict(list)
    for p in group["params"]:
        if p.grad is None:
            continue
        s = state[p]
        if len(s) == 0:  # a parameter added, or a state loaded, after the optimizer was built
            s.update(_zero_moments(p))
        s["step"] += 1
        by_step[s["step"]].append((p, s))
    for step, members in by_step.items():
        params = [p for p, _ in members]
        steps = [torch.tensor(float(step))] * len(params)  # read by the kernel for the bias corrections
        torch._fused_adamw_(params, [p.grad for p in params], [s["exp_avg"] for _, s in members],
                            [s["exp_avg_sq"] for _, s in members], [], steps, lr=group["lr"], beta1=beta1,
                            beta2=beta2, weight_decay=group["weight_decay"],
                            eps=group["eps"] / math.sqrt(1 - beta2 ** step), amsgrad=False, maximize=False)


def step(self, closure=None):
    """fairseq's `Adam.step`; each group of float32 CPU parameters in one fused kernel call."""
    if not all(_fusable(group) for group in self.param_groups):
        return _fairseq_step(self, closure)
    loss = closure() if closure is not None else None
    for group in self.param_groups:
        _fused_group_step(self.state, group)
    return loss


if kernel_runs_here():
    fairseq_adam.Adam.__init__ = __init__
    fairseq_adam.Adam.step = step
