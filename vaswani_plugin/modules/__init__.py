"""Plain-PyTorch building blocks of the Transformer (no fairseq import): testable alone."""
from .attention import FusedEncoderDecoderAttention, FusedSelfAttention, scaled_dot_product
from .embedding import ScaledEmbedding
from .layers import DecoderLayer, EncoderLayer, PositionwiseFeedForward
from .losses import label_smoothed_nll_loss
from .positional import SinusoidalPositions, sinusoid_table

__all__ = [
    "DecoderLayer",
    "EncoderLayer",
    "FusedEncoderDecoderAttention",
    "FusedSelfAttention",
    "PositionwiseFeedForward",
    "ScaledEmbedding",
    "SinusoidalPositions",
    "label_smoothed_nll_loss",
    "scaled_dot_product",
    "sinusoid_table",
]
