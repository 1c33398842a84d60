"""`--bf16` without a TPU: fairseq's own bfloat16 training path, on CPU or GPU.

fairseq 0.12 treats `--bf16` as "running on a TPU": `options.parse_args_and_arch` sets
`args.tpu = True` whenever `--bf16` is given (fairseq/options.py, post-processing of the parsed
flags), and `Trainer.__init__` then asks torch_xla for its device (`utils.get_tpu_device()`), which
fails with `AttributeError: 'NoneType' object has no attribute 'xla_device'` when torch_xla is not
installed. Everything else fairseq does for `--bf16` is device-agnostic: the model and criterion
are cast to bfloat16 and `FP16Optimizer` keeps fp32 master weights (no loss scaling, bfloat16 has
fp32's exponent range).

So when torch_xla is absent, the plugin clears that implied `tpu` flag (and its copies) just
before fairseq-train starts (`distributed_utils.call_main`, through which fairseq-train and
fairseq-hydra-train pass their final config), and `--bf16` trains on the CPU or GPU instead. With torch_xla installed
nothing changes. A test checks that the bf16 losses track fp32 ones over the first updates.
"""
import importlib.util

from fairseq.distributed import utils as distributed_utils

_fairseq_call_main = distributed_utils.call_main


def clear_implied_tpu(cfg) -> None:
    """Clear `tpu` in every section of a fairseq config where only `--bf16` implied it (no torch_xla)."""
    if cfg.common.bf16 and cfg.common.tpu and importlib.util.find_spec("torch_xla") is None:
        # Copies of common.tpu sit in other sections too (already resolved): distributed_training
        # picks the DDP wrapper by it, optimizer (adam) its implementation.
        for section in cfg.values():
            if hasattr(section, "keys") and "tpu" in section:
                section.tpu = False


def call_main(cfg, main, **kwargs):
    """fairseq's `call_main`, with `tpu` cleared where only `--bf16` implied it."""
    clear_implied_tpu(cfg)
    return _fairseq_call_main(cfg, main, **kwargs)


distributed_utils.call_main = call_main
