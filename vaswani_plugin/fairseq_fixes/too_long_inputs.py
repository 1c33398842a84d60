"""A sentence longer than `--max-source-positions` / `--max-target-positions` stops a tool with one line.

fairseq refuses such a sentence in validation and in fairseq-generate with a clear message ("Size
of sample #I is invalid (=(S, T)) since max_positions=(MS, MT), skip this example with
--skip-invalid-size-inputs-valid-test"), but raises it as a bare `Exception`, which prints a
traceback. With the plugin loaded the same message ends the tool as a `ConfigError` (one line,
exit status 1). Training data is untouched: fairseq skips over-long training pairs with a warning,
and `--skip-invalid-size-inputs-valid-test` still skips (and counts) them elsewhere. The limits
themselves are fairseq's; the model has no hard one (the sinusoids of §3.5 extend to any length).
"""
from fairseq.tasks import FairseqTask

from ..errors import ConfigError

_fairseq_filter_indices_by_size = FairseqTask.filter_indices_by_size


def filter_indices_by_size(self, indices, dataset, max_positions=None, ignore_invalid_inputs=False):
    try:
        return _fairseq_filter_indices_by_size(self, indices, dataset, max_positions, ignore_invalid_inputs)
    except Exception as e:
        if type(e) is not Exception or not str(e).startswith("Size of sample"):
            raise
        raise ConfigError(f"{e} (limits set by --max-source-positions and --max-target-positions)") from None


FairseqTask.filter_indices_by_size = filter_indices_by_size
