"""`vaswani-convert`: checkpoints of fairseq's `transformer` <-> `vaswani_transformer`, exactly.

    vaswani-convert --from-fairseq fairseq_checkpoint.pt ours.pt
    vaswani-convert --to-fairseq ours.pt fairseq_checkpoint.pt
    (or: python -m vaswani_plugin.convert ...)

- `config`: reading the model configuration of either checkpoint, and refusing the fairseq options
  vaswani_transformer cannot express;
- `weights`: the tensors' names, Q/K/V packing and shapes, both ways;
- `cli`: loading and saving checkpoints, the whole conversion either way, and the command (`main`),
  whose help text describes the conversion in full.
"""
from .cli import describe, fairseq_to_vaswani, load_checkpoint, main, vaswani_to_fairseq
from .config import (
    fairseq_args_from_vaswani,
    fairseq_model_args,
    vaswani_config_from_fairseq,
    vaswani_model_config,
)
from .weights import FAIRSEQ_PAD, fairseq_state_dict_from_vaswani, vaswani_state_dict_from_fairseq

__all__ = [
    "FAIRSEQ_PAD",
    "describe",
    "fairseq_args_from_vaswani",
    "fairseq_model_args",
    "fairseq_state_dict_from_vaswani",
    "fairseq_to_vaswani",
    "load_checkpoint",
    "main",
    "vaswani_config_from_fairseq",
    "vaswani_model_config",
    "vaswani_state_dict_from_fairseq",
    "vaswani_to_fairseq",
]
