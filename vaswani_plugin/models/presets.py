"""The paper's model sizes as named fairseq architectures (`--arch NAME`).

A preset only fills what the user did not set on the command line, so `--arch
vaswani_transformer_big --dropout 0.1` is the big model with P_drop = 0.1.
"""
import dataclasses

from fairseq.models import register_model_architecture

from .fairseq_options import translate_command_line
from .vaswani_transformer import VaswaniTransformerConfig


def _apply_preset(args, values: dict) -> None:
    """Set the preset's values, then the config defaults, wherever `args` has none yet."""
    translate_command_line(args)  # fairseq's transformer option names set our fields first
    for name, value in values.items():
        if getattr(args, name, None) is None:
            setattr(args, name, value)
    for f in dataclasses.fields(VaswaniTransformerConfig):
        default = f.default
        if isinstance(default, str) and default.startswith("${"):
            continue  # interpolations (max positions) are resolved by fairseq from the task
        if getattr(args, f.name, None) is None:
            setattr(args, f.name, default)


BASE = dict(encoder_layers=6, decoder_layers=6, d_model=512, d_ff=2048, attention_heads=8, dropout=0.1)
BIG = dict(BASE, d_model=1024, d_ff=4096, attention_heads=16, dropout=0.3)
BIG_EN_FR = dict(BIG, dropout=0.1)
PARSE = dict(BIG, encoder_layers=4, decoder_layers=4)
TINY = dict(encoder_layers=3, decoder_layers=3, d_model=256, d_ff=1024, attention_heads=4, dropout=0.1)


@register_model_architecture("vaswani_transformer", "vaswani_transformer_base")
def vaswani_transformer_base(args):
    """Table 3, "base": N=6, d_model=512, d_ff=2048, h=8, P_drop=0.1 (65M parameters in the paper)."""
    _apply_preset(args, BASE)


@register_model_architecture("vaswani_transformer", "vaswani_transformer_big")
def vaswani_transformer_big(args):
    """Table 3, "big": N=6, d_model=1024, d_ff=4096, h=16, P_drop=0.3 (213M parameters in the paper)."""
    _apply_preset(args, BIG)


@register_model_architecture("vaswani_transformer", "vaswani_transformer_big_en_fr")
def vaswani_transformer_big_en_fr(args):
    """§6.1: the big model trained for English-French used P_drop = 0.1 instead of 0.3."""
    _apply_preset(args, BIG_EN_FR)


@register_model_architecture("vaswani_transformer", "vaswani_transformer_parse")
def vaswani_transformer_parse(args):
    """§6.3: a 4-layer Transformer with d_model = 1024 for constituency parsing. The paper does not
    give d_ff, h or P_drop for it; we take the big model's (4096, 16, 0.3)."""
    _apply_preset(args, PARSE)


@register_model_architecture("vaswani_transformer", "vaswani_transformer_tiny")
def vaswani_transformer_tiny(args):
    """Not in the paper: N=3, d_model=256, d_ff=1024, h=4, P_drop=0.1, small enough to train on a
    CPU in minutes (the quickstart and the tests)."""
    _apply_preset(args, TINY)
