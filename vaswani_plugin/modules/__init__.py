"""Plain-PyTorch building blocks of the Transformer (no fairseq import): testable alone."""
from .attention import FusedEncoderDecoderAttention, FusedSelfAttention
from .attention_kernels import scaled_dot_product
from .dropout import dropout, dropout_add
from .embedding import ScaledEmbedding
from .fused_output_loss import fused_output_loss
from .layer_norm import layer_norm
from .layers import DecoderLayer, EncoderLayer, PositionwiseFeedForward
from .losses import label_smoothed_nll_loss
from .onednn_linear import PackedWeight, linear, matmul_nt, use_onednn_linears_
from .positional import SinusoidalPositions, sinusoid_table

__all__ = [
    "DecoderLayer",
    "EncoderLayer",
    "FusedEncoderDecoderAttention",
    "FusedSelfAttention",
    "PackedWeight",
    "PositionwiseFeedForward",
    "ScaledEmbedding",
    "SinusoidalPositions",
    "dropout",
    "dropout_add",
    "fused_output_loss",
    "label_smoothed_nll_loss",
    "layer_norm",
    "linear",
    "matmul_nt",
    "scaled_dot_product",
    "sinusoid_table",
    "use_onednn_linears_",
]
