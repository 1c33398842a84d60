"""Small fixes to fairseq 0.12 behaviour, applied when the plugin is imported.

Each module replaces one fairseq function by a wrapper around the original (`bf16_generation`: the
main of fairseq-generate and of fairseq-interactive; `clean_exit` registers an exit handler instead)
and says, in its docstring, what fairseq does alone and why the plugin changes it; each has its tests:
- `keep_last_batch`: the last batch smaller than `--required-batch-size-multiple` is kept, not
  silently dropped, so every input sentence gets exactly one output;
- `bf16_cpu`: `--bf16` trains without torch_xla, which fairseq assumes it implies;
- `bf16_generation`: `--bf16` decodes in bfloat16 in fairseq-generate and fairseq-interactive,
  which fairseq casts for `--fp16` only;
- `fp16_cpu`: `--fp16` and `--memory-efficient-fp16` train without CUDA;
- `full_help`: `--help` lists the options of the chosen model, task, criterion, optimizer, scheduler;
- `atomic_checkpoints`: the copy to `checkpoint_last.pt` is written atomically, so a kill mid-save
  leaves a loadable file;
- `checkpoint_errors`: an unusable checkpoint ends the tool with one line naming the file;
- `too_long_inputs`: a sentence over the length limits gives fairseq's message without a traceback;
- `fused_adam_cpu`: `--optimizer adam` updates float32 CPU parameters in one fused kernel pass
  instead of fairseq's seven per parameter (the same update);
- `clean_exit`: a run that stops while fairseq's data-loading thread is collating exits 0 instead
  of aborting ("terminate called without an active exception");
- `lean_beam_search`: the task's generator for one vaswani_transformer is the plugin's lean beam
  search (`models.beam_search`), fairseq's SequenceGenerator otherwise or with `--fairseq-beam-search`.

They are written against fairseq 0.12 (0.12.2, and the fairseq-fixed 0.12.3 builds of the same
code): with another fairseq installed, importing them says so once, in one log line.
"""
import logging
from typing import Optional

import fairseq

logger = logging.getLogger(__name__)
WRITTEN_FOR = "0.12"


def version_mismatch(version: str) -> Optional[str]:
    """The warning for an installed fairseq `version` other than the one the fixes were written for."""
    if version.split(".")[:2] == WRITTEN_FOR.split("."):
        return None
    return (f"vaswani_plugin's fixes to fairseq (vaswani_plugin/fairseq_fixes/) were written for fairseq "
            f"{WRITTEN_FOR}.x, but fairseq {version} is installed: each replaces a fairseq function and may no "
            f"longer fit it")


_mismatch = version_mismatch(str(getattr(fairseq, "__version__", "unknown")))
if _mismatch:
    logger.warning(_mismatch)

from . import (  # noqa: E402,F401
    atomic_checkpoints,
    bf16_cpu,
    bf16_generation,
    checkpoint_errors,
    clean_exit,
    fp16_cpu,
    full_help,
    fused_adam_cpu,
    keep_last_batch,
    lean_beam_search,
    too_long_inputs,
)
