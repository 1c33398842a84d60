"""Let torch's weights-only loader (the default since torch 2.6) read fairseq checkpoints.

A checkpoint written by fairseq holds tensors, dicts, lists and numbers, which the weights-only
unpickler accepts, plus two kinds of objects it refuses unless told otherwise:
- `argparse.Namespace` wherever a legacy (argparse-only) model or task was involved: fairseq's own
  `transformer` keeps its whole configuration there. Namespace is a plain attribute bag with no
  code of its own that runs on unpickling.
- numpy arrays and scalars of numbers in `extra_state["metrics"]`: with `--eval-bleu` fairseq logs
  its n-gram counts as numpy arrays, and every checkpoint saved after such a validation holds them.
  We allow numpy's array/scalar reconstructors and the numeric dtypes (bool, integers, floats,
  complex) only, so an array of Python objects (dtype object) is still refused.
Nothing broader: any other global in a checkpoint is still refused by torch.
"""
import argparse

import numpy as np
import torch

_multiarray = np._core.multiarray if hasattr(np, "_core") else np.core.multiarray  # numpy 2 / numpy 1
NUMERIC_DTYPES = [type(np.dtype(code)) for code in "?bhilqBHILQefdgFDG"]

SAFE_GLOBALS = [argparse.Namespace, _multiarray._reconstruct, _multiarray.scalar, np.ndarray, np.dtype,
                *NUMERIC_DTYPES]

if hasattr(torch.serialization, "add_safe_globals"):  # torch >= 2.4
    torch.serialization.add_safe_globals(SAFE_GLOBALS)
