"""English constituency parsing as sequence-to-sequence (paper section 6.3), in plain Python.

- :mod:`.trees`: the :class:`Tree` type and the Penn Treebank reader;
- :mod:`.schemes`: the linearization schemes (one object per target format, a registry);
- :mod:`.linearize`: trees to token sequences and back (with repairs), through a scheme;
- :mod:`.evalb`: EVALB (COLLINS.prm) bracket scoring;
- :mod:`.score_cli`: the ``vaswani-parse-score`` command;
- :mod:`.synthetic_treebank`: a PCFG treebank for experiments without the PTB.
"""

from .evalb import (COLLINS, EvalbParams, EvalbReport, EvalbSummary, SentenceResult, evalb_f1, evalb_score,
                    format_report, score_sentence)
from .linearize import PLACEHOLDER_TAG, REPAIR_KINDS, Delinearized, Repairs, delinearize, linearize_tree
from .schemes import LinearizationScheme, get_scheme, register_scheme, scheme_names
from .trees import (Tree, Treebank, TreebankError, parse_tree, parse_trees, read_treebank, save_trees,
                    strip_function_tags)

__all__ = [
    "COLLINS", "EvalbParams", "EvalbReport", "EvalbSummary", "SentenceResult", "evalb_f1", "evalb_score",
    "format_report", "score_sentence",
    "PLACEHOLDER_TAG", "REPAIR_KINDS", "Delinearized", "Repairs", "delinearize", "linearize_tree",
    "LinearizationScheme", "get_scheme", "register_scheme", "scheme_names",
    "generate_splits", "generate_trees", "write_treebank",
    "Tree", "Treebank", "TreebankError", "parse_tree", "parse_trees", "read_treebank", "save_trees",
    "strip_function_tags",
]

_SYNTHETIC = ("generate_splits", "generate_trees", "write_treebank")


def __getattr__(name: str):
    # Imported on first use: importing it here would make
    # `python -m vaswani_plugin.parsing.synthetic_treebank` warn that the
    # module was already imported.
    if name in _SYNTHETIC:
        from . import synthetic_treebank

        return getattr(synthetic_treebank, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
