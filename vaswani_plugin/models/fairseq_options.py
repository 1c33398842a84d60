"""fairseq's `transformer` options for `vaswani_transformer`: one table, read by the command line and by
`vaswani-convert`.

A fairseq `transformer` command line runs with `--arch vaswani_transformer*` switched in and means
the same model where ours can express it: `--encoder-embed-dim 256` sets `--d-model`,
`--activation-dropout` sets `--relu-dropout`, `--share-decoder-input-output-embed` is our default
tying (§3.4), and so on (`OPTIONS`). Where ours cannot (learned positions, LayerDrop, adaptive
softmax, another activation, different encoder and decoder widths, ...), the option stops the tool
with one line naming it; given at fairseq's own default it is accepted (it asks for nothing).

- `add_fairseq_options(parser)`: every option of fairseq's transformer that is not already one of
  ours (or the task's), beside ours in `--help`, its help ("fairseq's name: ...") saying what it
  sets here or that it is refused, and for `--share-decoder-input-output-embed`, whose default
  disagrees with ours, which of our options is fairseq's default;
- `translate_command_line(args)`: before a preset fills its defaults, the fairseq options given
  set our fields; two options for one field of ours (fairseq's or ours) that disagree stop with
  one line; a one-sided option (`--encoder-attention-heads` alone) sets the field for both sides,
  and says so in one log line;
- `inexpressible(args)` / `one_value_each(args)`: the same table applied to a fairseq checkpoint's
  options (`convert.config`).
"""
import argparse
import functools
import logging
from dataclasses import dataclass
from typing import Dict, Iterator, Optional, Tuple

from ..errors import ConfigError

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Option:
    """One fairseq `transformer` option: the field of ours it sets, or what we cannot express."""

    ours: Optional[str] = None  # our config field it sets (several fairseq options may set one)
    refused: Optional[str] = None  # what a value other than fairseq's default asks for
    inverted: bool = False  # our field is the option's negation
    model: bool = True  # False: how fairseq computes, not what (memory, export); checkpoints ignore it
    needs: Optional[str] = None  # the option without which fairseq ignores this one (then so do we)


def _sets(field: str, inverted: bool = False) -> Option:
    return Option(ours=field, inverted=inverted)


def _refused(what: str, model: bool = True, needs: Optional[str] = None) -> Option:
    return Option(refused=what, model=model, needs=needs)


_NORMFORMER = "NormFormer scaling"
_QUANT_NOISE = "quantization noise"
OPTIONS: Dict[str, Option] = {
    # -- expressible: fairseq option -> our field. Options sharing a field must agree.
    "encoder_layers": _sets("encoder_layers"),
    "decoder_layers": _sets("decoder_layers"),
    "encoder_embed_dim": _sets("d_model"),
    "decoder_embed_dim": _sets("d_model"),
    "decoder_input_dim": _sets("d_model"),
    "decoder_output_dim": _sets("d_model"),
    "encoder_ffn_embed_dim": _sets("d_ff"),
    "decoder_ffn_embed_dim": _sets("d_ff"),
    "encoder_attention_heads": _sets("attention_heads"),
    "decoder_attention_heads": _sets("attention_heads"),
    "encoder_normalize_before": _sets("normalize_before"),
    "decoder_normalize_before": _sets("normalize_before"),
    "dropout": _sets("dropout"),
    "attention_dropout": _sets("attention_dropout"),
    "activation_dropout": _sets("relu_dropout"),
    "relu_dropout": _sets("relu_dropout"),  # fairseq's older name, also ours
    "share_all_embeddings": _sets("share_all_embeddings"),
    # fairseq's default is untied; ours is tied (§3.4), which this option asks for
    "share_decoder_input_output_embed": _sets("untie_output_projection", inverted=True),
    # -- inexpressible: refused unless at fairseq's default
    "activation_fn": _refused("an activation other than the ReLU of §3.3"),
    "encoder_learned_pos": _refused("learned positional embeddings"),  # §3.5: sinusoids
    "decoder_learned_pos": _refused("learned positional embeddings"),
    "no_token_positional_embeddings": _refused("a model without positional encodings"),
    "encoder_layerdrop": _refused("LayerDrop"),
    "decoder_layerdrop": _refused("LayerDrop"),
    "encoder_layers_to_keep": _refused("LayerDrop pruning"),
    "decoder_layers_to_keep": _refused("LayerDrop pruning"),
    "adaptive_softmax_cutoff": _refused("adaptive softmax"),
    "adaptive_softmax_dropout": _refused("adaptive softmax", needs="adaptive_softmax_cutoff"),
    "adaptive_softmax_factor": _refused("adaptive softmax", needs="adaptive_softmax_cutoff"),
    "tie_adaptive_weights": _refused("adaptive softmax", needs="adaptive_softmax_cutoff"),
    "tie_adaptive_proj": _refused("adaptive softmax", needs="adaptive_softmax_cutoff"),
    "adaptive_input": _refused("adaptive input embeddings"),
    "no_scale_embedding": _refused("unscaled embeddings; §3.4 multiplies them by sqrt(d_model)"),
    "layernorm_embedding": _refused("a LayerNorm on the embeddings"),
    "cross_self_attention": _refused("cross+self-attention"),
    "no_cross_attention": _refused("a decoder without encoder-decoder attention"),
    "no_decoder_final_norm": _refused("a pre-LN decoder without its final LayerNorm"),
    "merge_src_tgt_embed": _refused("a merged source-target dictionary"),
    "encoder_embed_path": _refused("pretrained embeddings read from a file"),
    "decoder_embed_path": _refused("pretrained embeddings read from a file"),
    "quant_noise_pq": _refused(_QUANT_NOISE),
    "quant_noise_pq_block_size": _refused(_QUANT_NOISE, needs="quant_noise_pq"),
    "quant_noise_scalar": _refused(_QUANT_NOISE),
    "base_layers": _refused("BASE layers"),
    "base_sublayers": _refused("BASE layers", needs="base_layers"),
    "base_shuffle": _refused("BASE layers", needs="base_layers"),
    "char_inputs": _refused("character inputs"),
    "scale_attn": _refused(_NORMFORMER),
    "scale_fc": _refused(_NORMFORMER),
    "scale_heads": _refused(_NORMFORMER),
    "scale_resids": _refused(_NORMFORMER),
    # -- how fairseq computes, not what: nothing to convert, but not honoured by our model either
    "checkpoint_activations": _refused("activation checkpointing", model=False),
    "offload_activations": _refused("activation offloading", model=False),
    "min_params_to_wrap": _refused("FSDP wrapping of layers", model=False),
    "export": _refused("fairseq's ONNX/TorchScript export mode", model=False),
    "encoder_xformers_att_config": _refused("xFormers attention", model=False),
    "decoder_xformers_att_config": _refused("xFormers attention", model=False),
}


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _fairseq_parser() -> argparse.ArgumentParser:
    """fairseq's own `transformer` options (no defaults: architectures fill them in)."""
    from fairseq.models.transformer import TransformerModel

    parser = argparse.ArgumentParser(add_help=False)
    TransformerModel.add_args(parser)
    return parser


@functools.lru_cache(maxsize=None)
def fairseq_defaults() -> dict:
    """fairseq's `transformer` default for every option of the table (None where it has none): its
    TransformerConfig's, as its `transformer` architecture fills them in."""
    from fairseq.dataclass.utils import gen_parser_from_dataclass
    from fairseq.models import ARCH_CONFIG_REGISTRY
    from fairseq.models.transformer import TransformerConfig

    parser = argparse.ArgumentParser(add_help=False)
    gen_parser_from_dataclass(parser, TransformerConfig(), delete_default=False, with_prefix="")
    args = parser.parse_args([])
    for name, v in list(vars(args).items()):
        if v is None:
            delattr(args, name)  # left to the architecture (decoder sizes follow the encoder's)
    ARCH_CONFIG_REGISTRY["transformer"](args)
    return {name: getattr(args, name, None) for name in OPTIONS}


def value(args, name: str):
    """An option's value; integers that fairseq's parser leaves as strings (decoder_output_dim) as int."""
    v = getattr(args, name, None)
    return int(v) if isinstance(v, str) and v.lstrip("-").isdigit() else v


def _at_default(v, default) -> bool:
    if v is None or v == default:
        return True
    return default is None and not v  # False, 0, [] where fairseq has no default: off as well


def inexpressible(args, model_only: bool = False, skip: Tuple[str, ...] = ()) -> Iterator[Tuple[str, object, str]]:
    """(name, value, what) for each refused option of `args` away from fairseq's default (one that
    only qualifies another, `--adaptive-softmax-dropout`, counts only with that one)."""
    defaults = fairseq_defaults()
    for name, option in OPTIONS.items():
        if option.refused is None or name in skip or (model_only and not option.model):
            continue
        if option.needs is not None and _at_default(value(args, option.needs), defaults[option.needs]):
            continue
        v = value(args, name)
        if not _at_default(v, defaults[name]):
            yield name, v, option.refused


def one_value_each(args) -> Iterator[Tuple[str, object, str, object, str]]:
    """(a, value a, b, value b, our field) for each two fairseq options of `args` that set one field
    of ours to different values (b compared with the first option of its field)."""
    first: Dict[str, Tuple[str, object]] = {}
    for name, option in OPTIONS.items():
        if option.ours is None or option.ours == name or not hasattr(args, name):
            continue
        v = value(args, name)
        if option.ours not in first:
            first[option.ours] = (name, v)
        elif v != first[option.ours][1]:
            yield (*first[option.ours], name, v, option.ours)


# ------------------------------------------------------------------------------------ command line


def add_fairseq_options(parser) -> None:
    """Add to `parser` (the model's group) each fairseq transformer option that is not one of ours
    (nor already the task's), its help saying what it does here. Like ours they have no defaults
    (the group's): an option not given is absent or None."""
    taken = set(parser._option_string_actions)
    for action in _fairseq_parser()._actions:
        names = [s for s in action.option_strings if s not in taken]
        if not names or action.dest not in OPTIONS:
            continue
        kwargs = dict(dest=action.dest, help="fairseq's name: " + _help(action.dest))
        if action.nargs == 0:
            kwargs["action"] = "store_true"
        else:
            kwargs.update(type=action.type, choices=action.choices)
        parser.add_argument(*names, **kwargs)


def _help(name: str) -> str:
    option = OPTIONS[name]
    if option.refused is not None:
        return f"{option.refused}, which vaswani_transformer cannot express (fairseq's default only)"
    if option.inverted:  # the one option whose default disagrees with ours
        return (f"ties the pre-softmax projection, as vaswani_transformer does by default (§3.4); fairseq's "
                f"default (untied) is {flag(option.ours)} here")
    both = " (one value for encoder and decoder)" if name.startswith(("encoder_", "decoder_")) else ""
    return f"sets {flag(option.ours)}{both}"


def refusal(name: str, v) -> str:
    return f"fairseq option {flag(name)} = {v!r} ({OPTIONS[name].refused}) cannot be expressed by vaswani_transformer"


def translate_command_line(args) -> None:
    """Set our fields of `args` from the fairseq transformer options given on the command line.

    Called by every preset (and `--arch vaswani_transformer`) before defaults are filled, so a
    fairseq option counts as given like ours. Options without a value are not given (None, or
    False for a store_true flag)."""
    for name, v, _ in inexpressible(args):
        raise ConfigError(f"{refusal(name, v)}; only fairseq's default ({fairseq_defaults()[name]!r}) is accepted")
    given: Dict[str, Tuple[str, object]] = {}  # our field -> (first fairseq option given for it, its value)
    for name, option in OPTIONS.items():
        v = value(args, name)
        if option.ours is None or option.ours == name or v is None or v is False:
            continue
        if option.ours not in given:
            given[option.ours] = (name, v)
        elif v != given[option.ours][1]:
            first, first_v = given[option.ours]
            raise ConfigError(f"{_given(first, first_v)} and {_given(name, v)} disagree; vaswani_transformer has "
                              f"one {flag(option.ours)} for both")
    for field, (name, v) in given.items():
        ours = (not v) if OPTIONS[name].inverted else v
        own = getattr(args, field, None)
        if own is not None and own is not False and own != ours:
            raise ConfigError(f"{_given(name, v)} and {_given(field, own)} disagree: both set {flag(field)}")
        setattr(args, field, ours)
        _say_if_one_sided(args, name, field)


def _given(name: str, v) -> str:
    """An option as it was given: `--flag` for a store_true one, `--flag VALUE` otherwise."""
    return flag(name) if v is True else f"{flag(name)} {v}"


def _say_if_one_sided(args, name: str, field: str) -> None:
    """fairseq has two options where we have one field: say when only one side's was given."""
    if not name.startswith(("encoder_", "decoder_")):
        return
    side, other = name.split("_", 1)[0], "decoder" if name.startswith("encoder_") else "encoder"
    twin = other + name[len(side):]
    if twin in OPTIONS and value(args, twin) in (None, False):
        logger.info("%s sets %s for the %s too: vaswani_transformer has one for both", flag(name), flag(field), other)
