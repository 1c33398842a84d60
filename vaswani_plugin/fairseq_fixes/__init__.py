"""Small fixes to fairseq 0.12 behaviour, applied when the plugin is imported.

Each module replaces one fairseq function by a wrapper around the original and says, in its
docstring, what fairseq does alone and why the plugin changes it; each has its tests:
- `keep_last_batch`: the last batch smaller than `--required-batch-size-multiple` is kept, not
  silently dropped, so every input sentence gets exactly one output;
- `bf16_cpu`: `--bf16` trains without torch_xla, which fairseq assumes it implies;
- `fp16_cpu`: `--fp16` and `--memory-efficient-fp16` train without CUDA;
- `full_help`: `--help` lists the options of the chosen model, task, criterion, optimizer, scheduler;
- `atomic_checkpoints`: the copy to `checkpoint_last.pt` is written atomically, so a kill mid-save
  leaves a loadable file;
- `checkpoint_errors`: an unusable checkpoint ends the tool with one line naming the file;
- `too_long_inputs`: a sentence over the length limits gives fairseq's message without a traceback.
"""
from . import (  # noqa: F401
    atomic_checkpoints,
    bf16_cpu,
    checkpoint_errors,
    fp16_cpu,
    full_help,
    keep_last_batch,
    too_long_inputs,
)
