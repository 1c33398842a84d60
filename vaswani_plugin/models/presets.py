"""The paper's model sizes as named fairseq architectures (`--arch NAME`): one table, one row each.

A preset only fills what the user did not set on the command line, so `--arch
vaswani_transformer_big --dropout 0.1` is the big model with P_drop = 0.1. Every field a preset does
not name keeps `VaswaniTransformerConfig`'s default. `recipes/hydra/transformer_base.yaml` spells the
base row out for fairseq-hydra-train; a test checks it against this table.
"""
import dataclasses
from typing import NamedTuple

from fairseq.models import register_model_architecture

from .fairseq_options import translate_command_line
from .vaswani_transformer import VaswaniTransformerConfig


class Preset(NamedTuple):
    source: str  # where the paper gives the figures
    layers: int  # N, in the encoder and in the decoder (§3.1)
    d_model: int
    d_ff: int
    heads: int  # h (§3.2.2)
    dropout: float  # P_drop (§5.4)
    paper_params: str  # the paper's parameter count (Table 3), "" where it gives none
    note: str = ""


PRESETS = {
    # name                           source                N  d_model  d_ff   h   P_drop  params
    "vaswani_transformer_base": Preset("Table 3, base",    6,   512,   2048,   8,  0.1,   "65M"),
    "vaswani_transformer_big": Preset("Table 3, big",      6,  1024,   4096,  16,  0.3,   "213M"),
    "vaswani_transformer_big_en_fr": Preset("§6.1",        6,  1024,   4096,  16,  0.1,   "213M",
                                            "The big model trained for English-French used P_drop = 0.1."),
    "vaswani_transformer_parse": Preset("§6.3",            4,  1024,   4096,  16,  0.3,   "",
                                        "The paper gives N and d_model only; d_ff, h and P_drop are the big model's."),
    "vaswani_transformer_tiny": Preset("not in the paper", 3,   256,   1024,   4,  0.1,   "",
                                       "Small enough to train on a CPU in minutes (the quickstart and the tests)."),
}


def preset_values(preset: Preset) -> dict:
    """The preset as `VaswaniTransformerConfig` field values."""
    return dict(encoder_layers=preset.layers, decoder_layers=preset.layers, d_model=preset.d_model,
                d_ff=preset.d_ff, attention_heads=preset.heads, dropout=preset.dropout)


def _apply_preset(args, values: dict) -> None:
    """Set the preset's values, then the config defaults, wherever the argparse namespace `args` has
    none yet. The one place a preset meets the command line."""
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


def preset_architecture(name: str, preset: Preset):
    """The function fairseq calls for `--arch name`: the preset under the command line."""
    values = preset_values(preset)

    def apply(args):
        _apply_preset(args, values)

    apply.__name__ = name
    params = f" ({preset.paper_params} parameters in the paper)" if preset.paper_params else ""
    apply.__doc__ = (f"{preset.source}: N={preset.layers}, d_model={preset.d_model}, d_ff={preset.d_ff}, "
                     f"h={preset.heads}, P_drop={preset.dropout}{params}. {preset.note}").strip()
    return apply


for _name, _preset in PRESETS.items():
    register_model_architecture("vaswani_transformer", _name)(preset_architecture(_name, _preset))
