"""`--fp16` without a GPU: fairseq's own fp16 training path (fp32 master weights, dynamic loss
scaling), on a CPU, so that the precision the recipes train in runs in CI.

fairseq 0.12 assumes CUDA in two places of that path, and crashes on a torch built without it
("AssertionError: Torch not compiled with CUDA enabled"):

- `FP16Optimizer` (plain `--fp16`) keys its flat fp32 copy of the parameters by
  `torch.cuda.current_device()` (`_FP16OptimizerMixin.build_fp32_params`), at the first update;
- after a gradient overflow, `Trainer.train_step` logs a zero gradient norm made by
  `torch.tensor(0.0).cuda()`: the first overflow (which loss scaling expects) would end the run,
  with `--memory-efficient-fp16` too.

When the plugin is loaded, parameters that are not on a GPU get the same flat fp32 copy, keyed by
their device's index as fairseq's gradient and parameter syncs look it up (None for the CPU), and
the overflow's zero norm is made on the trainer's own device (`self.device`, which is CUDA
wherever fairseq used `.cuda()`). Everything else is fairseq's: the model and batches in fp16,
the scaler halving the scale and skipping the update on an overflow, growing it every
`--fp16-scale-window` updates. GPU runs take fairseq's code unchanged.

`--amp` is not made to run in reduced precision: fairseq's `--amp` is CUDA's autocast and
GradScaler, which torch disables on a CPU (warning only about autocast), so it trains in fp32 there
with a loss scale of 1; the plugin says so in one line and points to --fp16 and --bf16.
"""
import inspect
import logging
import textwrap

import torch
from fairseq import trainer as fairseq_trainer
from fairseq.optim.amp_optimizer import AMPOptimizer
from fairseq.optim.fp16_optimizer import _FP16OptimizerMixin

logger = logging.getLogger(__name__)

_fairseq_build_fp32_params = _FP16OptimizerMixin.build_fp32_params.__func__


def build_fp32_params(cls, args, params, flatten=True):
    """fairseq's `build_fp32_params`; for parameters off the GPU, the flat copy without CUDA."""
    if not flatten or any(p.device.type == "cuda" for p in params):
        return _fairseq_build_fp32_params(cls, args, params, flatten)
    flat = torch.nn.Parameter(torch.cat([p.data.reshape(-1).float() for p in params]))  # [sum numel]
    flat.grad = torch.zeros_like(flat.data)
    return {params[0].device.index: flat}  # fairseq's syncs group parameters by p.device.index


_FP16OptimizerMixin.build_fp32_params = classmethod(build_fp32_params)

_fairseq_build_amp_optimizer = AMPOptimizer.build_optimizer.__func__


def build_amp_optimizer(cls, cfg, params, **kwargs):
    """fairseq's AMPOptimizer; without CUDA, one line saying that --amp trains in fp32."""
    if not torch.cuda.is_available():
        logger.warning("--amp without CUDA trains in fp32 (fairseq's --amp is CUDA's autocast and loss scaler); "
                       "--fp16 or --bf16 train in reduced precision on a CPU")
    return _fairseq_build_amp_optimizer(cls, cfg, params, **kwargs)


AMPOptimizer.build_optimizer = classmethod(build_amp_optimizer)

# Trainer.train_step is one 200-line method; only its overflow branch's `.cuda()` changes.
_OVERFLOW_NORM = "grad_norm = torch.tensor(0.0).cuda()"
_lines, _first = inspect.getsourcelines(fairseq_trainer.Trainer.train_step)
_source = "\n" * (_first - 1) + textwrap.dedent("".join(_lines))  # tracebacks keep trainer.py's line numbers
if _source.count(_OVERFLOW_NORM) == 1:
    _namespace = {}
    exec(compile(_source.replace(_OVERFLOW_NORM, "grad_norm = torch.tensor(0.0, device=self.device)"),
                 inspect.getsourcefile(fairseq_trainer.Trainer), "exec"), vars(fairseq_trainer), _namespace)
    fairseq_trainer.Trainer.train_step = _namespace["train_step"]
else:  # another fairseq than the one this fix was written for (see fairseq_fixes/__init__.py)
    logger.warning("fp16_cpu: fairseq's Trainer.train_step has changed; a gradient overflow in fp16 on a "
                   "CPU may fail")
