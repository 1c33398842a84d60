"""Every sentence gets its batch: undo fairseq 0.12's silent drop of a last, smaller batch.

fairseq's `data_utils.batch_by_size` builds batches whose size is a multiple of
`--required-batch-size-multiple` (default 8), then throws away the last batch when its size is not
such a multiple: 100 test sentences give 96 translations in fairseq-generate, and validation (loss,
`--eval-bleu`, `--eval-f1`), the hub interface and each training epoch lose the same tail. The
multiple exists for tensor-core efficiency, never for correctness, so when the plugin is loaded the
tail comes back as one last, smaller batch. Batches are consecutive runs of the ordered indices, so
the dropped tail is exactly the indices after the last kept batch. Nothing else changes: the same
batches, in the same order, plus the tail.
"""
import numpy as np
from fairseq.data import data_utils

_fairseq_batch_by_size = data_utils.batch_by_size


def batch_by_size(indices, num_tokens_fn, num_tokens_vec=None, max_tokens=None, max_sentences=None,
                  required_batch_size_multiple=1, fixed_shapes=None):
    """fairseq's `batch_by_size`, with the last batch kept whatever its size."""
    if not isinstance(indices, np.ndarray):  # read an iterator once, for fairseq and for the tail
        indices = np.fromiter(indices, dtype=np.int64, count=-1)
    batches = _fairseq_batch_by_size(indices, num_tokens_fn, num_tokens_vec, max_tokens, max_sentences,
                                     required_batch_size_multiple, fixed_shapes)
    if fixed_shapes is not None:  # fixed shapes are explicit requests (TPU); fairseq drops nothing there
        return batches
    kept = sum(len(b) for b in batches)
    if kept < len(indices):
        batches = list(batches) + [indices[kept:]]
    return batches


data_utils.batch_by_size = batch_by_size
