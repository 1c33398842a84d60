"""The tensors of fairseq's `transformer` and of `vaswani_transformer`: names, Q/K/V packing and
shapes, both ways (see the package's `cli` module for the whole conversion)."""
from collections import OrderedDict

from ..errors import ConfigError

# One layer's tensors: (fairseq name, our name, block, blocks): our tensor is fairseq's tensors
# concatenated along dim 0 in block order (Q, K, V for self-attention; K, V for the encoder-decoder
# attention). Listed in the order of fairseq's state dict.
_ENCODER_LAYER = (
    ("self_attn.k_proj", "self_attn.qkv_proj", 1, 3),
    ("self_attn.v_proj", "self_attn.qkv_proj", 2, 3),
    ("self_attn.q_proj", "self_attn.qkv_proj", 0, 3),
    ("self_attn.out_proj", "self_attn.out_proj", 0, 1),
    ("self_attn_layer_norm", "attn_block.norm", 0, 1),
    ("fc1", "ffn.fc1", 0, 1),
    ("fc2", "ffn.fc2", 0, 1),
    ("final_layer_norm", "ffn_block.norm", 0, 1),
)
_DECODER_LAYER = (
    ("self_attn.k_proj", "self_attn.qkv_proj", 1, 3),
    ("self_attn.v_proj", "self_attn.qkv_proj", 2, 3),
    ("self_attn.q_proj", "self_attn.qkv_proj", 0, 3),
    ("self_attn.out_proj", "self_attn.out_proj", 0, 1),
    ("self_attn_layer_norm", "self_attn_block.norm", 0, 1),
    ("encoder_attn.k_proj", "cross_attn.kv_proj", 0, 2),
    ("encoder_attn.v_proj", "cross_attn.kv_proj", 1, 2),
    ("encoder_attn.q_proj", "cross_attn.q_proj", 0, 1),
    ("encoder_attn.out_proj", "cross_attn.out_proj", 0, 1),
    ("encoder_attn_layer_norm", "cross_attn_block.norm", 0, 1),
    ("fc1", "ffn.fc1", 0, 1),
    ("fc2", "ffn.fc2", 0, 1),
    ("final_layer_norm", "ffn_block.norm", 0, 1),
)

FAIRSEQ_PAD = 1  # fairseq's Dictionary: <s>=0, <pad>=1, </s>=2, <unk>=3


class _Vocab:
    """What building a model reads from a dictionary: its size and padding index."""

    def __init__(self, size: int):
        self.size = size

    def __len__(self):
        return self.size

    def pad(self):
        return FAIRSEQ_PAD

    def eos(self):
        return 2


class _ShapeTask:
    def __init__(self, src_vocab: int, tgt_vocab: int, joined: bool):
        self.source_dictionary = _Vocab(src_vocab)
        self.target_dictionary = self.source_dictionary if joined else _Vocab(tgt_vocab)


def _check_shapes(produced: dict, model, what: str, path: str) -> None:
    """Every tensor the model expects, with its shape, and nothing else (built on the meta device)."""
    expected = model.state_dict()
    for name, value in expected.items():
        if name not in produced:
            raise ConfigError(f"{path}: no tensor for {what}'s {name}")
        if tuple(produced[name].shape) != tuple(value.shape):
            raise ConfigError(f"{path}: {name} has shape {tuple(produced[name].shape)}, but the configuration "
                              f"implies {tuple(value.shape)} for {what}")
    extra = [name for name in produced if name not in expected]
    if extra:
        raise ConfigError(f"{path}: {what} has no tensor {extra[0]}")


# ------------------------------------------------------------------------------- fairseq -> ours


def _upgrade_legacy_names(sd: dict) -> dict:
    """Names of older fairseq versions, renamed as fairseq itself does when loading them: packed
    `in_proj_weight`, `layer_norms.N`, `decoder.embed_out`."""
    import re

    out = OrderedDict()
    for name, value in sd.items():
        m = re.fullmatch(r"(.*)\.in_proj_(weight|bias)", name)
        if m:
            for proj, part in zip(("q_proj", "k_proj", "v_proj"), value.chunk(3)):
                out[f"{m.group(1)}.{proj}.{m.group(2)}"] = part
            continue
        m = re.fullmatch(r"(encoder|decoder)(\.layers\.\d+)\.layer_norms\.(\d)\.(weight|bias)", name)
        if m:
            names = ("self_attn_layer_norm", "final_layer_norm") if m.group(1) == "encoder" else (
                "self_attn_layer_norm", "encoder_attn_layer_norm", "final_layer_norm")
            out[f"{m.group(1)}{m.group(2)}.{names[int(m.group(3))]}.{m.group(4)}"] = value
            continue
        out["decoder.output_projection.weight" if name == "decoder.embed_out" else name] = value
    return out


def _layer_pairs(m: dict):
    """(fairseq name, our name, block, blocks) for every layer tensor and the pre-LN final norms."""
    for side, table in (("encoder", _ENCODER_LAYER), ("decoder", _DECODER_LAYER)):
        for i in range(m[f"{side}_layers"]):
            for theirs, ours, block, blocks in table:
                for suffix in ("weight", "bias"):
                    yield (f"{side}.layers.{i}.{theirs}.{suffix}", f"{side}.layers.{i}.{ours}.{suffix}",
                           block, blocks)
        if m["normalize_before"]:
            for suffix in ("weight", "bias"):
                yield f"{side}.layer_norm.{suffix}", f"{side}.final_norm.{suffix}", 0, 1


def vaswani_state_dict_from_fairseq(sd: dict, m: dict, path: str = "checkpoint") -> OrderedDict:
    """fairseq's tensors renamed (and Q/K/V packed) for our model configuration `m`. Tied tensors
    stay one tensor. Works on any name -> tensor mapping of that model (weights, gradients)."""
    import torch

    sd = _upgrade_legacy_names(sd)
    used = set()

    def take(name):
        if name not in sd:
            raise ConfigError(f"{path}: tensor {name} is missing (expected for {m['encoder_layers']}+"
                              f"{m['decoder_layers']} layers, normalize_before={m['normalize_before']})")
        used.add(name)
        return sd[name]

    out = OrderedDict()
    enc = take("encoder.embed_tokens.weight")
    dec = take("decoder.embed_tokens.weight")
    if m["share_all_embeddings"] and enc is not dec and not torch.equal(enc, dec):
        raise ConfigError(f"{path}: --share-all-embeddings is set but the encoder and decoder embeddings differ")
    out["encoder.embedding.embed_tokens.weight"] = enc
    out["decoder.embedding.embed_tokens.weight"] = enc if m["share_all_embeddings"] else dec
    parts = OrderedDict()
    for theirs, ours, block, blocks in _layer_pairs(m):
        parts.setdefault(ours, [None] * blocks)[block] = take(theirs)
    for ours, tensors in parts.items():
        out[ours] = tensors[0] if len(tensors) == 1 else torch.cat(tensors, dim=0)
    projection = sd.get("decoder.output_projection.weight")
    if m["untie_output_projection"]:
        out["decoder.output_projection.weight"] = take("decoder.output_projection.weight")
    elif projection is not None:
        if projection is not dec and not torch.equal(projection, dec):
            raise ConfigError(f"{path}: the output projection is declared tied to the target embedding "
                              f"(--share-decoder-input-output-embed) but differs from it")
        used.add("decoder.output_projection.weight")
    # Buffers with no information for us: format versions (checked with the config) and positions
    # (sinusoids are recomputed; a learned table was checked to be the paper's).
    for side in ("encoder", "decoder"):
        used.update(name for name in sd if name == f"{side}.version" or name.startswith(f"{side}.embed_positions."))
    unexpected = [name for name in sd if name not in used]
    if unexpected:
        raise ConfigError(f"{path}: tensor {unexpected[0]} has no counterpart in vaswani_transformer "
                          f"(found {len(unexpected)} such tensor(s))")
    return out


# ------------------------------------------------------------------------------- ours -> fairseq


def _fairseq_positions(side: str, m: dict, embed) -> OrderedDict:
    import torch

    from ..modules import sinusoid_table

    if m["positional_layout"] == "paper":
        n = int(m["max_source_positions" if side == "encoder" else "max_target_positions"])
        table = torch.zeros(n + FAIRSEQ_PAD + 1, embed.size(1), dtype=embed.dtype)
        table[FAIRSEQ_PAD + 1:] = sinusoid_table(n, embed.size(1), "paper").to(embed.dtype)
        return OrderedDict(weight=table)
    from fairseq.modules import SinusoidalPositionalEmbedding

    # whatever the installed fairseq keeps: 0.12.2 a 1-element `_float_tensor` placeholder, fairseq-fixed none
    return SinusoidalPositionalEmbedding(8, FAIRSEQ_PAD, init_size=4).state_dict()


def fairseq_state_dict_from_vaswani(sd: dict, m: dict, path: str = "checkpoint") -> OrderedDict:
    """Our tensors under fairseq's names, in the order of fairseq's own state dict."""
    import torch

    def take(name):
        if name not in sd:
            raise ConfigError(f"{path}: tensor {name} is missing for the configured vaswani_transformer")
        return sd[name]

    layers = {theirs: (ours, block, blocks) for theirs, ours, block, blocks in _layer_pairs(m)}
    out = OrderedDict()
    for side in ("encoder", "decoder"):
        out[f"{side}.version"] = torch.tensor([3.0])  # fairseq's current format
        embed = take(f"{side}.embedding.embed_tokens.weight")
        out[f"{side}.embed_tokens.weight"] = embed
        for name, value in _fairseq_positions(side, m, embed).items():
            out[f"{side}.embed_positions.{name}"] = value
        for theirs, (ours, block, blocks) in layers.items():
            if theirs.startswith(side + "."):
                value = take(ours)
                out[theirs] = value if blocks == 1 else value.chunk(blocks, dim=0)[block].clone()
    out["decoder.output_projection.weight"] = (take("decoder.output_projection.weight")
                                               if m["untie_output_projection"] else out["decoder.embed_tokens.weight"])
    return out


def _vaswani_names(m: dict) -> set:
    names = {ours for _, ours, _, _ in _layer_pairs(m)}
    names.update({"encoder.embedding.embed_tokens.weight", "decoder.embedding.embed_tokens.weight"})
    if m["untie_output_projection"]:
        names.add("decoder.output_projection.weight")
    return names
