"""Reading the model configuration of fairseq's `transformer` and of `vaswani_transformer`
checkpoints, mapping one onto the other, and refusing the fairseq options our model cannot express
(see the package's `cli` module for the whole conversion)."""
import argparse
import copy
import dataclasses

from ..checkpoint_io import raw_model_config
from ..errors import ConfigError
from ..models.fairseq_options import OPTIONS, flag, inexpressible, one_value_each, refusal
from .weights import FAIRSEQ_PAD


def _full_cfg(state: dict, path: str) -> dict:
    """The checkpoint's configuration as plain containers (legacy `args` converted like fairseq does)."""
    if state.get("cfg") is not None:
        return copy.copy(dict(state["cfg"]))
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from omegaconf import OmegaConf

    try:
        cfg = convert_namespace_to_omegaconf(copy.deepcopy(state["args"]))
        return OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)
    except Exception as e:
        raise ConfigError(f"{path}: cannot read the legacy 'args' configuration ({type(e).__name__}: "
                          f"{str(e)[:200]})") from None


def _model_namespace(model_cfg) -> argparse.Namespace:
    """A flat Namespace (encoder_embed_dim, ...) from a legacy Namespace or a (nested) dict."""
    if isinstance(model_cfg, argparse.Namespace):
        return argparse.Namespace(**vars(model_cfg))
    flat = {}
    for key, value in dict(model_cfg or {}).items():
        if key in ("encoder", "decoder", "quant_noise") and isinstance(value, dict):
            flat.update({f"{key}_{k}": v for k, v in value.items()})
        else:
            flat[key] = value
    return argparse.Namespace(**flat)


# ------------------------------------------------------------------------------- fairseq -> ours

# Refused by the table unless at fairseq's default, but expressible here in some cases: our own §3.5
# table exported as learned positions by --to-fairseq; no final LayerNorm in a post-LN model.
_CHECKED_BELOW = ("encoder_learned_pos", "decoder_learned_pos", "no_decoder_final_norm")


def fairseq_model_args(state: dict, path: str = "checkpoint") -> argparse.Namespace:
    """The model options of a fairseq `transformer` checkpoint, with its architecture's defaults
    filled in the way fairseq's build_model does."""
    from fairseq.models import ARCH_CONFIG_REGISTRY, ARCH_MODEL_NAME_REGISTRY

    args = _model_namespace(raw_model_config(state))
    arch = getattr(args, "arch", None) or getattr(args, "_name", None)
    model_name = ARCH_MODEL_NAME_REGISTRY.get(arch, arch)
    if model_name != "transformer":
        family = sorted(a for a, m in ARCH_MODEL_NAME_REGISTRY.items() if m == "transformer")
        hint = " (already ours; --to-fairseq goes the other way)" if model_name == "vaswani_transformer" else ""
        raise ConfigError(f"{path}: architecture {arch!r} (model {model_name!r}){hint} is not fairseq's "
                          f"transformer; expected one of: {', '.join(family)}")
    ARCH_CONFIG_REGISTRY[arch](args)  # fills only what is missing, as fairseq does when loading
    return args


def vaswani_config_from_fairseq(args: argparse.Namespace, state_dict: dict, path: str = "checkpoint") -> dict:
    """Our model configuration for fairseq options `args`; refuses what we cannot express."""
    import torch

    from ..models.vaswani_transformer import VaswaniTransformerConfig
    from ..modules import sinusoid_table

    # The one table of fairseq's options (models.fairseq_options), as for command lines; positions
    # and the final LayerNorm depend on the tensors too and are checked below.
    for name, v, _ in inexpressible(args, model_only=True, skip=_CHECKED_BELOW):
        raise ConfigError(f"{path}: {refusal(name, v)}")
    for a, value_a, b, value_b, ours in one_value_each(args):
        raise ConfigError(f"{path}: fairseq options {flag(a)} = {value_a!r} and {flag(b)} = {value_b!r} "
                          f"differ; vaswani_transformer has one {ours} for both")
    if bool(args.encoder_learned_pos) != bool(args.decoder_learned_pos):
        raise ConfigError(f"{path}: fairseq options --encoder-learned-pos = {args.encoder_learned_pos!r} and "
                          f"--decoder-learned-pos = {args.decoder_learned_pos!r} differ; vaswani_transformer has "
                          f"one kind of positional encodings for both")
    normalize_before = bool(args.encoder_normalize_before)
    if normalize_before and getattr(args, "no_decoder_final_norm", False):
        raise ConfigError(f"{path}: fairseq option --no-decoder-final-norm cannot be expressed by "
                          f"vaswani_transformer (pre-LN always ends with a LayerNorm)")
    if normalize_before:
        for side, newest_without in (("encoder", 1), ("decoder", 2)):
            version = state_dict.get(f"{side}.version", torch.tensor([1.0]))
            if float(version.reshape(-1)[0]) <= newest_without:
                raise ConfigError(f"{path}: {side}.version = {float(version.reshape(-1)[0]):g}: fairseq runs this "
                                  f"pre-LN {side} without its final LayerNorm, which vaswani_transformer cannot "
                                  f"express")

    layout = "fairseq"
    if args.encoder_learned_pos:  # only our own §3.5 table, exported by --to-fairseq, comes back
        for side in ("encoder", "decoder"):
            table = state_dict.get(f"{side}.embed_positions.weight")
            if table is None or table.dim() != 2:
                raise ConfigError(f"{path}: --{side}-learned-pos is set but {side}.embed_positions.weight is missing")
            rows = table[FAIRSEQ_PAD + 1:]
            paper = sinusoid_table(rows.size(0), rows.size(1), "paper").to(rows.dtype)
            if not torch.equal(rows, paper):
                raise ConfigError(f"{path}: fairseq option --{side}-learned-pos "
                                  f"({OPTIONS[side + '_learned_pos'].refused}) cannot be expressed by "
                                  f"vaswani_transformer (sinusoids only, §3.5)")
        layout = "paper"

    share_all = bool(args.share_all_embeddings)
    values = dict(
        encoder_layers=int(args.encoder_layers),
        decoder_layers=int(args.decoder_layers),
        d_model=int(args.encoder_embed_dim),
        d_ff=int(args.encoder_ffn_embed_dim),
        attention_heads=int(args.encoder_attention_heads),
        dropout=float(args.dropout),
        attention_dropout=float(args.attention_dropout or 0.0),
        # fairseq falls back on the deprecated --relu-dropout when --activation-dropout is 0
        relu_dropout=float(args.activation_dropout or getattr(args, "relu_dropout", 0.0) or 0.0),
        share_all_embeddings=share_all,
        normalize_before=normalize_before,
        positional_layout=layout,
        untie_output_projection=not (share_all or args.share_decoder_input_output_embed),
        max_source_positions=int(getattr(args, "max_source_positions", None) or 1024),
        max_target_positions=int(getattr(args, "max_target_positions", None) or 1024),
    )
    fields = [f.name for f in dataclasses.fields(VaswaniTransformerConfig) if not f.name.startswith("_")]
    missing = [name for name in fields if name not in values]
    assert not missing, f"no fairseq counterpart chosen for {missing}"  # a new field needs a mapping here
    return {"_name": "vaswani_transformer", **{name: values[name] for name in fields}}


# ------------------------------------------------------------------------------- ours -> fairseq


def vaswani_model_config(state: dict, path: str = "checkpoint") -> dict:
    """Our model configuration from one of our checkpoints, with defaults for fields it predates."""
    from fairseq.models import ARCH_MODEL_NAME_REGISTRY

    from ..models.vaswani_transformer import VaswaniTransformerConfig

    raw = raw_model_config(state)
    raw = dict(vars(raw)) if isinstance(raw, argparse.Namespace) else dict(raw or {})
    arch = raw.get("_name") or raw.get("arch")
    model_name = ARCH_MODEL_NAME_REGISTRY.get(arch, arch)
    if model_name != "vaswani_transformer":
        hint = " (fairseq's transformer: use --from-fairseq)" if model_name == "transformer" else ""
        raise ConfigError(f"{path}: architecture {arch!r}{hint} is not vaswani_transformer; --to-fairseq "
                          f"expects a checkpoint written with --arch vaswani_transformer or one of its presets")
    task = (state.get("cfg") or {}).get("task") or {}
    m = {}
    for f in dataclasses.fields(VaswaniTransformerConfig):
        if f.name.startswith("_"):
            continue
        value = raw.get(f.name, f.default)
        if isinstance(value, str) and value.startswith("${task."):  # an unresolved interpolation
            value = task.get(value[len("${task."):-1], 1024)
        m[f.name] = value
    return m


def fairseq_args_from_vaswani(m: dict, task_cfg: dict) -> argparse.Namespace:
    """fairseq `transformer` options for our model configuration `m`: a flat Namespace holding the
    task's options too, as fairseq-train writes them (tools rebuild the task from it)."""
    from fairseq.models import ARCH_CONFIG_REGISTRY

    if m["share_all_embeddings"] and m["untie_output_projection"]:
        raise ConfigError("--share-all-embeddings with --untie-output-projection cannot be expressed by "
                          "fairseq's transformer")
    args = argparse.Namespace(**{k: v for k, v in dict(task_cfg or {}).items() if k != "_name"})
    args.task = dict(task_cfg or {}).get("_name", "translation")
    args.arch = args._name = "transformer"
    d, d_ff, heads = m["d_model"], m["d_ff"], m["attention_heads"]
    for side in ("encoder", "decoder"):
        setattr(args, f"{side}_embed_dim", d)
        setattr(args, f"{side}_ffn_embed_dim", d_ff)
        setattr(args, f"{side}_attention_heads", heads)
        setattr(args, f"{side}_layers", m[f"{side}_layers"])
        setattr(args, f"{side}_normalize_before", bool(m["normalize_before"]))
        setattr(args, f"{side}_learned_pos", m["positional_layout"] == "paper")  # our table, see the docstring
    args.decoder_input_dim = args.decoder_output_dim = d
    args.dropout = m["dropout"]
    args.attention_dropout = m["attention_dropout"]
    args.activation_dropout = m["relu_dropout"]
    args.activation_fn = "relu"
    args.share_all_embeddings = bool(m["share_all_embeddings"])
    args.share_decoder_input_output_embed = not m["untie_output_projection"]
    args.max_source_positions = int(m["max_source_positions"])
    args.max_target_positions = int(m["max_target_positions"])
    ARCH_CONFIG_REGISTRY["transformer"](args)  # every other option at fairseq's default
    return args
