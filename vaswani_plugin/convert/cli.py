"""`vaswani-convert`: checkpoints of fairseq's `transformer` <-> `vaswani_transformer`, exactly.

    vaswani-convert --from-fairseq fairseq_checkpoint.pt ours.pt
    vaswani-convert --to-fairseq ours.pt fairseq_checkpoint.pt
    (or: python -m vaswani_plugin.convert ...)

--from-fairseq reads a checkpoint of any architecture of fairseq's `transformer` model
(transformer, transformer_wmt_en_de, transformer_vaswani_wmt_en_de_big, transformer_vaswani_wmt_en_fr_big,
transformer_wmt_en_de_big, transformer_wmt_en_de_big_t2t, transformer_iwslt_de_en, ...), its configuration
stored either as a `cfg` dict or as a legacy `args` Namespace, and writes a `vaswani_transformer`
checkpoint that computes the same function: separate Q, K, V projections become the packed ones,
fairseq's sinusoids keep their layout and offset (`positional_layout: fairseq`), pre-LN models keep
`normalize_before`, and the tying options map to `share_all_embeddings` / `untie_output_projection`.
Options our model cannot express (learned positions, LayerDrop, adaptive softmax or input, an
activation other than ReLU, --no-scale-embedding, --layernorm-embedding, different encoder and decoder
widths, heads or feed-forward sizes, cross+self-attention, quant-noise, ...) are refused with the
option named: never a silently different model.

--to-fairseq does the reverse (so that fairseq itself, or tools reading fairseq checkpoints such as
CTranslate2's fairseq converter, can use our models). The paper's sinusoids (`positional_layout:
paper`) have no sinusoidal counterpart in fairseq; they are written as fairseq's learned positional
embeddings holding exactly our table (rows padding_idx + 1 + i, with fairseq's padding index 1), and
such tables are recognised again by --from-fairseq.

Only the model is carried, with the task configuration and the training counters: the optimizer state
(and any EMA copy of the weights) is left out; resume from the result with --reset-optimizer.
Dictionaries are not stored in checkpoints: keep using the data directory the model was trained with.
OUT is written to a temporary file and renamed once the whole conversion succeeded.
"""
import argparse
import copy
import os
import sys
from collections import OrderedDict

from ..checkpoint_io import load_checkpoint, save_atomically
from ..errors import ConfigError
from .config import (
    _full_cfg,
    fairseq_args_from_vaswani,
    fairseq_model_args,
    vaswani_config_from_fairseq,
    vaswani_model_config,
)
from .weights import (
    _check_shapes,
    _ShapeTask,
    _vaswani_names,
    fairseq_state_dict_from_vaswani,
    vaswani_state_dict_from_fairseq,
)

_OPTIMIZER_FREE_KEYS = ("criterion", "optimizer_history", "task_state", "extra_state")


def _kept_state(state: dict, cfg: dict, model: OrderedDict) -> dict:
    """The output checkpoint: new cfg and model, the input's counters, no optimizer state. Keys that
    fairseq's loader expects (optimizer_history, extra_state) are always present."""
    out = {"args": None, "cfg": cfg, "model": model}
    for key in _OPTIMIZER_FREE_KEYS:
        if key in state:
            out[key] = copy.deepcopy(state[key])
    history = out.get("optimizer_history") or [{"criterion_name": "CrossEntropyCriterion"}]
    out["optimizer_history"] = [{k: v for k, v in h.items() if k != "optimizer"} for h in history]
    last = out["optimizer_history"][-1]
    last.setdefault("optimizer_name", "none")
    if "lr_scheduler_state" not in last:
        last["lr_scheduler_state"] = {"best": last.pop("best_loss", None)}
    last.setdefault("num_updates", 0)
    # EMA copies hold the other implementation's parameter names: left out with the optimizer.
    out["extra_state"] = {k: v for k, v in (out.get("extra_state") or {}).items() if not k.startswith("ema")}
    out.setdefault("task_state", {})
    return out


# ------------------------------------------------------------------------------- fairseq -> ours


def _build_vaswani_on_meta(m: dict, src_vocab: int, tgt_vocab: int):
    import torch
    from omegaconf import OmegaConf

    from ..models.vaswani_transformer import VaswaniTransformerModel

    with torch.device("meta"):
        return VaswaniTransformerModel.build_model(
            OmegaConf.create(m), _ShapeTask(src_vocab, tgt_vocab, m["share_all_embeddings"]))


def fairseq_to_vaswani(state: dict, path: str = "checkpoint") -> dict:
    """A whole fairseq `transformer` checkpoint -> a `vaswani_transformer` checkpoint (model only)."""
    args = fairseq_model_args(state, path)
    m = vaswani_config_from_fairseq(args, state["model"], path)
    model = vaswani_state_dict_from_fairseq(state["model"], m, path)
    vocab = (model["encoder.embedding.embed_tokens.weight"].size(0),
             model["decoder.embedding.embed_tokens.weight"].size(0))
    try:
        meta = _build_vaswani_on_meta(m, *vocab)
    except ValueError as e:  # ConfigError from our own checks (e.g. heads not dividing d_model)
        raise ConfigError(f"{path}: {e}") from None
    _check_shapes(model, meta, "vaswani_transformer", path)
    cfg = _full_cfg(state, path)
    cfg["model"] = m
    return _kept_state(state, cfg, model)


# ------------------------------------------------------------------------------- ours -> fairseq


def vaswani_to_fairseq(state: dict, path: str = "checkpoint") -> dict:
    """A whole `vaswani_transformer` checkpoint -> a fairseq `transformer` checkpoint (model only)."""
    import torch
    from fairseq.models.transformer import TransformerModel

    m = vaswani_model_config(state, path)
    cfg = _full_cfg(state, path)
    args = fairseq_args_from_vaswani(m, cfg.get("task"))
    model = fairseq_state_dict_from_vaswani(state["model"], m, path)
    leftover = [name for name in state["model"] if name not in _vaswani_names(m)]
    if leftover:
        raise ConfigError(f"{path}: tensor {leftover[0]} does not belong to the configured vaswani_transformer")
    src, tgt = model["encoder.embed_tokens.weight"].size(0), model["decoder.embed_tokens.weight"].size(0)
    with torch.device("meta"):
        meta = TransformerModel.build_model(copy.copy(args), _ShapeTask(src, tgt, m["share_all_embeddings"]))
    _check_shapes(model, meta, "fairseq's transformer", path)
    cfg["model"] = args
    return _kept_state(state, cfg, model)


# --------------------------------------------------------------------------------------- command


def describe(m: dict) -> str:
    tying = ("source, target and output tied" if m["share_all_embeddings"] else
             "target and output tied" if not m["untie_output_projection"] else "no tying")
    return (f"{m['encoder_layers']}+{m['decoder_layers']} layers, d_model {m['d_model']}, d_ff {m['d_ff']}, "
            f"{m['attention_heads']} heads, {'pre' if m['normalize_before'] else 'post'}-LN, "
            f"positions '{m['positional_layout']}', {tying}")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="vaswani-convert", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    direction = parser.add_mutually_exclusive_group(required=True)
    direction.add_argument("--from-fairseq", action="store_true",
                           help="IN is a checkpoint of fairseq's transformer; write a vaswani_transformer one")
    direction.add_argument("--to-fairseq", action="store_true",
                           help="IN is a vaswani_transformer checkpoint; write one of fairseq's transformer")
    parser.add_argument("input", metavar="IN.pt", help="checkpoint to read")
    parser.add_argument("output", metavar="OUT.pt",
                        help="where to write the converted checkpoint (model only, no optimizer state)")
    args = parser.parse_args(argv)
    if not os.path.isfile(args.input):
        parser.error(f"no such checkpoint file: {args.input}")
    if os.path.abspath(args.input) == os.path.abspath(args.output):
        parser.error("OUT.pt must be another file than IN.pt")
    if not os.path.isdir(os.path.dirname(os.path.abspath(args.output))):
        parser.error(f"no such directory for OUT.pt: {os.path.dirname(os.path.abspath(args.output))}")


    state = load_checkpoint(args.input)
    if args.from_fairseq:
        out = fairseq_to_vaswani(state, args.input)
        summary = f"vaswani_transformer, {describe(out['cfg']['model'])}"
    else:
        out = vaswani_to_fairseq(state, args.input)
        summary = f"fairseq transformer, {describe(vaswani_model_config(state, args.input))}"
    save_atomically(out, args.output)
    print(f"wrote {args.output}: {summary}", file=sys.stderr)
