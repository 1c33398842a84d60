"""vaswani-plugin: the Transformer of "Attention Is All You Need" as a fairseq extension.

Importing this package (fairseq does it for `--user-dir`) registers, explicitly:
- model `vaswani_transformer` and its presets, and the parser `vaswani_pointer_parser` (`models/`),
- criterion `label_smoothed_xent` (`criterions/`),
- lr scheduler `inverse_sqrt_warmup` (`optim/`),
- task `constituency_parsing` (`tasks/`, §6.3),
and allows the few non-tensor types fairseq checkpoints hold through torch's weights-only loader.
It also applies small fixes to fairseq 0.12 (`fairseq_fixes/`): no sentence silently dropped, `--bf16`
without torch_xla, atomic `checkpoint_last.pt`, one-line errors for unusable checkpoints and
over-long inputs.
"""
import os

from . import checkpoint_safety, fairseq_fixes  # noqa: F401
from .criterions import label_smoothed_xent  # noqa: F401
from .models import pointer_parser, presets, vaswani_transformer  # noqa: F401
from .optim import inverse_sqrt_warmup  # noqa: F401
from .tasks import constituency_parsing  # noqa: F401

__version__ = "0.1.0"


def user_dir() -> str:
    """The path to pass as fairseq's `--user-dir` (this package's directory)."""
    return os.path.dirname(os.path.abspath(__file__))
