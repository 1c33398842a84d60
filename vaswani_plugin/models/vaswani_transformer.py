"""The Transformer of §3 as a fairseq model: `--arch vaswani_transformer` and its presets.

Read top to bottom: config -> encoder (§3.1 left) -> decoder (§3.1 right) -> model (§3.4 weight
tying). The layers themselves are plain PyTorch in `vaswani_plugin.modules`.

Departures from the paper, each pinned by a test:
- the smoothed loss and the warmup schedule live in the criterion and scheduler, not here;
- decoder self-attention relies on targets being right-padded (fairseq's default,
  `--left-pad-target False`): the causal mask alone then hides every pad from every real query;
- `--positional-layout fairseq`, `--normalize-before` and `--untie-output-projection` exist only to
  express fairseq checkpoints (see `vaswani_plugin.convert`);
- the paper gives no initialisation: we use fairseq's transformer's (embeddings N(0, d^-1/2); Q, K, V
  xavier-uniform with gain 1/sqrt(2) and W^O xavier-uniform, in `modules.attention`; feed-forward
  layers PyTorch's default), which learned more per update on Multi30k than xavier-uniform with zero
  biases everywhere (issue 12; benchmarks/multi30k_fidelity.sh).

Speed only, same function: the linear-layer backend is chosen in `build_model` (on CPU in fp32,
oneDNN where it is faster than MKL: `modules.onednn_linear`; the layers then print as
OneDNNLinear), and during beam search the encoder output is never copied: reorders compose into
"memory_rows", which every layer's encoder-decoder attention reads through its cache, one K/V per
source sentence (`modules.attention_cache`).
"""
import logging
from dataclasses import dataclass, field
from typing import Dict, Optional

from fairseq.dataclass import ChoiceEnum, FairseqDataclass
from fairseq.dataclass.utils import gen_parser_from_dataclass
from fairseq.models import (
    ARCH_CONFIG_REGISTRY,
    FairseqEncoder,
    FairseqEncoderDecoderModel,
    FairseqIncrementalDecoder,
    register_model,
)
from omegaconf import II
from torch import Tensor, nn

from ..errors import ConfigError
from ..modules import DecoderLayer, EncoderLayer, PackedWeight, ScaledEmbedding, linear, use_onednn_linears_
from ..modules.freed_memory import keep_freed_memory
from ..modules.decoding_linear import bound_linear
from ..modules.onednn_linear import backend_summary
from .fairseq_options import add_fairseq_options, translate_command_line

logger = logging.getLogger(__name__)


@dataclass
class VaswaniTransformerConfig(FairseqDataclass):
    """Defaults are the paper's base model (Table 3, row "base")."""

    encoder_layers: int = field(default=6, metadata={"help": "N, encoder layers (§3.1)"})
    decoder_layers: int = field(default=6, metadata={"help": "N, decoder layers (§3.1)"})
    d_model: int = field(default=512, metadata={"help": "d_model, width of every layer (§3.1)"})
    d_ff: int = field(default=2048, metadata={"help": "d_ff, inner width of the feed-forward layers (§3.3)"})
    attention_heads: int = field(default=8, metadata={"help": "h, attention heads; d_model must divide by it (§3.2.2)"})
    dropout: float = field(default=0.1, metadata={"help": "P_drop on sub-layer outputs and embedding sums (§5.4)"})
    attention_dropout: float = field(default=0.0, metadata={"help": "dropout on attention weights (not in the paper)"})
    relu_dropout: float = field(default=0.0, metadata={"help": "dropout after the feed-forward ReLU (not in the paper)"})
    share_all_embeddings: bool = field(
        default=False,
        metadata={"help": "tie source embedding, target embedding and pre-softmax projection (§3.4); "
                          "needs a joined dictionary. Without it the target embedding and the "
                          "pre-softmax projection are still tied"},
    )
    normalize_before: bool = field(
        default=False, metadata={"help": "pre-LN sub-layers, LayerNorm(x) before each sub-layer (not the paper's)"}
    )
    positional_layout: ChoiceEnum(["paper", "fairseq"]) = field(
        default="paper",
        metadata={"help": "sinusoid layout: 'paper' (§3.5, interleaved sin/cos, first token at position 0) "
                          "or 'fairseq' (fairseq's transformer: sines then cosines, offset padding_idx+1)"},
    )
    untie_output_projection: bool = field(
        default=False,
        metadata={"help": "a separate pre-softmax projection instead of the target embedding's weights: "
                          "departs from §3.4; exists for fairseq checkpoints without "
                          "--share-decoder-input-output-embed"},
    )
    max_source_positions: int = II("task.max_source_positions")
    max_target_positions: int = II("task.max_target_positions")


def _check_config(cfg, task) -> None:
    """Contradicting flags stop here with the flag named, before any tensor is built."""
    if cfg.d_model % cfg.attention_heads != 0:
        raise ConfigError(f"--d-model ({cfg.d_model}) must be divisible by --attention-heads ({cfg.attention_heads})")
    for name in ("encoder_layers", "decoder_layers", "d_model", "d_ff", "attention_heads"):
        if getattr(cfg, name) < 1:
            raise ConfigError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(cfg, name)}")
    for name in ("dropout", "attention_dropout", "relu_dropout"):
        if not 0.0 <= getattr(cfg, name) < 1.0:
            raise ConfigError(f"--{name.replace('_', '-')} must be in [0, 1), got {getattr(cfg, name)}")
    if cfg.share_all_embeddings and cfg.untie_output_projection:
        raise ConfigError("--untie-output-projection contradicts --share-all-embeddings (which ties the "
                          "pre-softmax projection too)")
    if cfg.share_all_embeddings and task.source_dictionary != task.target_dictionary:
        raise ConfigError("--share-all-embeddings needs a joined dictionary "
                         "(fairseq-preprocess --joined-dictionary, or --srcdict and --tgtdict the same file)")


def _embedding(dictionary, d_model: int) -> nn.Embedding:
    # N(0, d^-1/2) so that after the sqrt(d_model) scaling of §3.4 the embeddings have unit variance.
    emb = nn.Embedding(len(dictionary), d_model, padding_idx=dictionary.pad())
    nn.init.normal_(emb.weight, mean=0.0, std=d_model ** -0.5)
    nn.init.zeros_(emb.weight[dictionary.pad()])
    return emb


class VaswaniEncoder(FairseqEncoder):
    """Scaled embedding + positions -> N encoder layers (§3.1, §3.4, §3.5)."""

    def __init__(self, cfg, dictionary, embed_tokens: nn.Embedding):
        super().__init__(dictionary)
        self.embedding = ScaledEmbedding(embed_tokens, cfg.positional_layout, cfg.dropout)
        self.layers = nn.ModuleList(
            EncoderLayer(cfg.d_model, cfg.attention_heads, cfg.d_ff, cfg.dropout, cfg.attention_dropout,
                         cfg.relu_dropout, cfg.normalize_before)
            for _ in range(cfg.encoder_layers)
        )
        # Pre-LN leaves the residual stream un-normalised: one final LayerNorm closes it.
        self.final_norm = nn.LayerNorm(cfg.d_model) if cfg.normalize_before else None
        self.max_source_positions = cfg.max_source_positions

    def forward(self, src_tokens: Tensor, src_lengths: Optional[Tensor] = None, **unused) -> Dict[str, Tensor]:
        """src_tokens [B, S] -> {"memory": [B, S, d], "memory_padding_mask": [B, S] or absent}."""
        padding_mask = src_tokens.eq(self.dictionary.pad())  # [B, S]
        if not padding_mask.any():
            padding_mask = None  # lets attention take its unmasked (fastest) path
        x = self.embedding(src_tokens)  # [B, S, d]
        for layer in self.layers:
            x = layer(x, padding_mask)
        if self.final_norm is not None:
            x = self.final_norm(x)
        out = {"memory": x}
        if padding_mask is not None:
            out["memory_padding_mask"] = padding_mask
        return out

    def make_generation_fast_(self, **unused):
        """fairseq-generate, -interactive and the hub call this: from now on the model only decodes."""
        use_onednn_linears_(self, pack=True)

    def reorder_encoder_out(self, encoder_out: Dict[str, Tensor], new_order: Tensor) -> Dict[str, Tensor]:
        """Beam search calls this every step. The reorders compose into "memory_rows" [B] (decoder row
        -> row of "memory"), so the encoder output is never copied, not even beam-fold at the start:
        the decoder's encoder-decoder attention keeps one K/V per source sentence."""
        rows = encoder_out.get("memory_rows")
        return {**encoder_out, "memory_rows": new_order if rows is None else rows.index_select(0, new_order)}

    def max_positions(self) -> int:
        return self.max_source_positions


class VaswaniDecoder(FairseqIncrementalDecoder):
    """Scaled embedding + positions -> N decoder layers -> tied projection (§3.1, §3.4)."""

    def __init__(self, cfg, dictionary, embed_tokens: nn.Embedding):
        super().__init__(dictionary)
        self.embedding = ScaledEmbedding(embed_tokens, cfg.positional_layout, cfg.dropout)
        self.layers = nn.ModuleList(
            DecoderLayer(cfg.d_model, cfg.attention_heads, cfg.d_ff, cfg.dropout, cfg.attention_dropout,
                         cfg.relu_dropout, cfg.normalize_before)
            for _ in range(cfg.decoder_layers)
        )
        self.final_norm = nn.LayerNorm(cfg.d_model) if cfg.normalize_before else None
        # Not the paper's (§3.4 ties it to the target embedding): fairseq's untied pre-softmax projection.
        self.output_projection = None
        if cfg.untie_output_projection:
            self.output_projection = nn.Linear(cfg.d_model, len(dictionary), bias=False)
            nn.init.normal_(self.output_projection.weight, mean=0.0, std=cfg.d_model ** -0.5)
        self.max_target_positions = cfg.max_target_positions
        # fairseq switches this on for --print-alignment (make_generation_fast_); training and plain
        # beam search then skip the explicit attention-weights path.
        self.need_attn = False
        self._packed_output = None  # oneDNN's packed copy of the projection, once only decoding is left

    def forward(
        self,
        prev_output_tokens: Tensor,
        encoder_out: Optional[Dict[str, Tensor]] = None,
        incremental_state: Optional[Dict] = None,
        features_only: bool = False,
        alignment_layer: Optional[int] = None,
        **unused,
    ):
        """prev_output_tokens [B, T] -> (logits [B, T, V], {"attn": [weights [B, T, S] or None]}).

        With `incremental_state`, only the newest position is computed (T = 1 in the output)."""
        x, attn = self.extract_features(prev_output_tokens, encoder_out, incremental_state, alignment_layer)
        if not features_only:
            x = self.output_layer(x)
        return x, {"attn": [attn]}

    def extract_features(self, prev_output_tokens, encoder_out, incremental_state=None, alignment_layer=None,
                         **unused):
        x = self.decoder_input(prev_output_tokens, encoder_out, incremental_state)  # [B, T, d]
        memory = encoder_out["memory"]
        memory_padding_mask = encoder_out.get("memory_padding_mask")
        memory_rows = encoder_out.get("memory_rows")  # beam search's reorders, see reorder_encoder_out
        if alignment_layer is None:
            alignment_layer = len(self.layers) - 1
        attn = None
        for i, layer in enumerate(self.layers):
            want = self.need_attn and i == alignment_layer
            x, weights = layer(x, memory, memory_padding_mask, incremental_state=incremental_state,
                               need_weights=want, memory_rows=memory_rows)
            if want:
                attn = weights.float().mean(dim=1)  # [B, T, S], averaged over heads as fairseq expects
        if self.final_norm is not None:
            x = self.final_norm(x)
        return x, attn

    def decoder_input(self, prev_output_tokens: Tensor, encoder_out: Dict[str, Tensor],
                      incremental_state: Optional[Dict] = None) -> Tensor:
        """The embedded previous outputs (§3.4, §3.5): [B, T, d], T = 1 while decoding incrementally."""
        return self.embedding(prev_output_tokens, last_step_only=incremental_state is not None)

    def output_layer(self, features: Tensor) -> Tensor:
        """Pre-softmax linear transformation, sharing the target embedding's weights (§3.4). While
        decoding on CPU the weight is used in oneDNN's packed layout (modules.onednn_linear): with a
        large vocabulary this product is the costliest of a beam-search step."""
        return linear(features, self.output_projection_weight(), packed=self._packed_output)  # [B, T, V]

    def decoding_output_layer(self):
        """`output_layer` for a loop of decoding steps (the lean beam search's), its checks made once:
        features [rows, d] -> logits [rows, V], valid until the next call (where the few-row kernel
        computes them, into one buffer: `decoding_linear.bound_linear`'s `reuse_output`)."""
        return bound_linear(self.output_projection_weight(), None, self._packed_output, self.output_layer,
                            reuse_output=True)

    def output_projection_weight(self) -> Tensor:
        """[V, d] weight of the pre-softmax projection: the target embedding's (§3.4) or the untied one.
        The criterion's fused projection + loss (`modules.fused_output_loss`) multiplies by it."""
        if self.output_projection is not None:
            return self.output_projection.weight
        return self.embedding.embed_tokens.weight

    def make_generation_fast_(self, need_attn: bool = False, **unused):
        """fairseq-generate, -interactive and the hub call this: from now on the model only decodes."""
        self.need_attn = need_attn
        use_onednn_linears_(self, pack=True)
        if self._packed_output is None:
            self._packed_output = PackedWeight()

    def max_positions(self) -> int:
        return self.max_target_positions


@register_model("vaswani_transformer", dataclass=VaswaniTransformerConfig)
class VaswaniTransformerModel(FairseqEncoderDecoderModel):
    """Encoder-decoder Transformer of "Attention Is All You Need" (Vaswani et al., 2017)."""

    @classmethod
    def add_args(cls, parser):
        # Defaults are left out of the namespace so that the preset (--arch) can fill them in.
        gen_parser_from_dataclass(parser, VaswaniTransformerConfig(), delete_default=True, with_prefix="")
        add_fairseq_options(parser)  # fairseq's transformer names, translated by the preset

    @classmethod
    def build_model(cls, cfg, task):
        _check_config(cfg, task)
        src_embed = _embedding(task.source_dictionary, cfg.d_model)
        tgt_embed = src_embed if cfg.share_all_embeddings else _embedding(task.target_dictionary, cfg.d_model)
        model = cls(*cls.build_encoder_decoder(cfg, task, src_embed, tgt_embed))
        # The linear-layer backend (speed only): fp32 GEMMs on CPU through oneDNN where it beats MKL, and
        # F.linear for other dtypes and devices or where oneDNN's ops are missing (modules.onednn_linear)
        use_onednn_linears_(model)
        logger.info("linear layers: %s", backend_summary())
        # Speed only: a training step's blocks reused, not faulted in anew every step (modules.freed_memory)
        logger.info("memory: %s", keep_freed_memory())
        return model

    @classmethod
    def build_encoder_decoder(cls, cfg, task, src_embed: nn.Embedding, tgt_embed: nn.Embedding):
        """The two stacks (a model that changes either overrides this)."""
        return (VaswaniEncoder(cfg, task.source_dictionary, src_embed),
                VaswaniDecoder(cfg, task.target_dictionary, tgt_embed))


# `--arch vaswani_transformer` (no preset) got a no-op from register_model: it translates fairseq's
# transformer options too, as every preset does before filling its defaults.
ARCH_CONFIG_REGISTRY["vaswani_transformer"] = translate_command_line
