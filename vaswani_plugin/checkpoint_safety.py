"""Let torch's weights-only loader (the default since torch 2.6) read fairseq checkpoints.

A checkpoint written by fairseq holds tensors, dicts, lists and numbers, which the weights-only
unpickler accepts, plus `argparse.Namespace` wherever a legacy (argparse-only) model or task was
involved: fairseq's own `transformer` keeps its whole configuration there. Namespace is a plain
attribute bag with no code of its own that runs on unpickling, so it is the one class we allow.
Nothing broader: any other global in a checkpoint is still refused by torch.
"""
import argparse

import torch

SAFE_GLOBALS = [argparse.Namespace]

if hasattr(torch.serialization, "add_safe_globals"):  # torch >= 2.4
    torch.serialization.add_safe_globals(SAFE_GLOBALS)
