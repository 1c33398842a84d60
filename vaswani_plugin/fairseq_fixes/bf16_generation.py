"""`--bf16` decodes in bfloat16: fairseq-generate and fairseq-interactive cast the models they load.

fairseq 0.12's fairseq-generate and fairseq-interactive cast the models they load to float16 for
`--fp16` (`model.half()`), but nothing casts them for `--bf16`: the flag is accepted and decoding
silently runs in float32 (the same scores to the last bit). When the plugin is loaded, those two
tools cast every model they load (the ensemble's and `--lm-path`'s) to bfloat16 when `--bf16` is
given without `--fp16`, as they do for `--fp16`. The hub interface and training are unchanged:
there the config is the checkpoint's, where fairseq does not cast for `--fp16` either.
"""
import functools
from argparse import Namespace

from fairseq import checkpoint_utils
from fairseq_cli import generate, interactive

_fairseq_load_model_ensemble = checkpoint_utils.load_model_ensemble


def _wants_bf16(cfg) -> bool:
    common = cfg if isinstance(cfg, Namespace) else cfg.common
    return bool(common.bf16) and not common.fp16


def _load_model_ensemble_in_bf16(*args, **kwargs):
    models, model_args = _fairseq_load_model_ensemble(*args, **kwargs)
    return [model.bfloat16() for model in models], model_args


def _casting_models(fairseq_main):
    """`fairseq_main(cfg, ...)` (a tool's main), its models loaded in bfloat16 where `cfg` asks for it."""

    @functools.wraps(fairseq_main)
    def main(cfg, *args, **kwargs):
        if not _wants_bf16(cfg):
            return fairseq_main(cfg, *args, **kwargs)
        checkpoint_utils.load_model_ensemble = _load_model_ensemble_in_bf16  # for this tool's run only
        try:
            return fairseq_main(cfg, *args, **kwargs)
        finally:
            checkpoint_utils.load_model_ensemble = _fairseq_load_model_ensemble

    return main


# the tools' cli_main look their main up when they call it, after --user-dir has imported the plugin
generate.main = _casting_models(generate.main)
interactive.main = _casting_models(interactive.main)
