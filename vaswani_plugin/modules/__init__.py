"""Plain-PyTorch building blocks of the Transformer (no fairseq import): testable alone."""
from .attention import FusedEncoderDecoderAttention, FusedSelfAttention, scaled_dot_product
from .embedding import ScaledEmbedding
from .fused_output_loss import fused_output_loss
from .layers import DecoderLayer, EncoderLayer, PositionwiseFeedForward
from .losses import label_smoothed_nll_loss
from .packed_linear import prepack_linears_
from .positional import SinusoidalPositions, sinusoid_table

__all__ = [
    "DecoderLayer",
    "EncoderLayer",
    "FusedEncoderDecoderAttention",
    "FusedSelfAttention",
    "PositionwiseFeedForward",
    "ScaledEmbedding",
    "SinusoidalPositions",
    "fused_output_loss",
    "label_smoothed_nll_loss",
    "prepack_linears_",
    "scaled_dot_product",
    "sinusoid_table",
]
