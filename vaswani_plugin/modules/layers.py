"""Encoder and decoder layers, §3.1 and §3.3 (plain PyTorch).

Each sub-layer is wrapped as in §3.1 and §5.4: LayerNorm(x + Dropout(Sublayer(x))) ("post-LN", the
paper). `normalize_before` selects the pre-LN variant x + Dropout(Sublayer(LayerNorm(x))) used by
tensor2tensor's later presets (a departure from the paper, off by default; it exists so fairseq's
`normalize_before` checkpoints can be expressed).
"""
from typing import Dict, Optional, Tuple

from torch import Tensor, nn

from .attention import FusedEncoderDecoderAttention, FusedSelfAttention
from .dropout import dropout, dropout_add
from .layer_norm import layer_norm
from .relu import relu_feeding_a_linear_


class PositionwiseFeedForward(nn.Module):
    """FFN(x) = max(0, x W1 + b1) W2 + b2   (§3.3, Eq. 2); `relu_dropout` after the ReLU.

    W1, W2 and the biases keep PyTorch's default `nn.Linear` initialisation, as in fairseq's
    transformer (the paper specifies none; xavier with zero biases learned less per update)."""

    def __init__(self, d_model: int, d_ff: int, relu_dropout: float = 0.0):
        super().__init__()
        self.fc1 = nn.Linear(d_model, d_ff)
        self.fc2 = nn.Linear(d_ff, d_model)
        self.relu_dropout = relu_dropout

    def forward(self, x: Tensor) -> Tensor:
        # The ReLU runs in place (fc1's backward needs its input, not its output: no [N, d_ff] copy)
        # on fc1's own 2-D result: nn.Linear returns a [B, T, d_ff] input's product as a view, and an
        # in-place op on a view makes autograd's backward zero-fill, copy and scatter a whole
        # [N, d_ff] gradient (CopySlices) on top of the ReLU's own pass. Its output goes to fc2
        # alone (through dropout), so its backward may write into its incoming gradient (modules.relu).
        h = dropout(relu_feeding_a_linear_(self.fc1(x.reshape(-1, x.size(-1)))), self.relu_dropout, self.training)
        return self.fc2(h).view(x.shape)  # h: [N, d_ff], N = B * T


class _Residual(nn.Module):
    """One residual connection with its LayerNorm and dropout (§3.1, §5.4):
    `x = block.close(x, sublayer(block.open(x)))`."""

    def __init__(self, d_model: int, dropout: float, normalize_before: bool):
        super().__init__()
        self.norm = nn.LayerNorm(d_model)
        self.dropout = dropout
        self.normalize_before = normalize_before

    def open(self, x: Tensor) -> Tensor:
        return layer_norm(x, self.norm) if self.normalize_before else x

    def close(self, x: Tensor, y: Tensor) -> Tensor:
        x = dropout_add(x, y, self.dropout, self.training)  # x + Dropout(y), cheaper masks on CPU (modules.dropout)
        return x if self.normalize_before else layer_norm(x, self.norm)  # keeps its output (modules.layer_norm)


class EncoderLayer(nn.Module):
    """Self-attention then feed-forward, each in a residual block (§3.1)."""

    def __init__(self, d_model, num_heads, d_ff, dropout, attention_dropout=0.0, relu_dropout=0.0,
                 normalize_before=False):
        super().__init__()
        self.self_attn = FusedSelfAttention(d_model, num_heads, attention_dropout)
        self.ffn = PositionwiseFeedForward(d_model, d_ff, relu_dropout)
        self.attn_block = _Residual(d_model, dropout, normalize_before)
        self.ffn_block = _Residual(d_model, dropout, normalize_before)

    def forward(self, x: Tensor, padding_mask: Optional[Tensor]) -> Tensor:
        """x: [B, S, d]; padding_mask: [B, S] True at padding, or None when there is none."""
        x = self.attn_block.close(x, self.self_attn(self.attn_block.open(x), key_padding_mask=padding_mask)[0])
        return self.ffn_block.close(x, self.ffn(self.ffn_block.open(x)))


class DecoderLayer(nn.Module):
    """Masked self-attention, encoder-decoder attention, feed-forward (§3.1). The lean beam search
    runs the same maths for one token per hypothesis as `decoding_step.BeamDecodingStep` (a change
    here goes there too; tests/test_decoding_speedups.py holds the two equal)."""

    def __init__(self, d_model, num_heads, d_ff, dropout, attention_dropout=0.0, relu_dropout=0.0,
                 normalize_before=False):
        super().__init__()
        self.self_attn = FusedSelfAttention(d_model, num_heads, attention_dropout)
        self.cross_attn = FusedEncoderDecoderAttention(d_model, num_heads, attention_dropout)
        self.ffn = PositionwiseFeedForward(d_model, d_ff, relu_dropout)
        self.self_attn_block = _Residual(d_model, dropout, normalize_before)
        self.cross_attn_block = _Residual(d_model, dropout, normalize_before)
        self.ffn_block = _Residual(d_model, dropout, normalize_before)

    def forward(
        self,
        x: Tensor,
        memory: Tensor,
        memory_padding_mask: Optional[Tensor],
        self_padding_mask: Optional[Tensor] = None,
        incremental_state: Optional[Dict] = None,
        need_weights: bool = False,
        memory_rows: Optional[Tensor] = None,
    ) -> Tuple[Tensor, Optional[Tensor]]:
        """x: [B, T, d] (T = 1 when decoding step by step); memory: [N, S, d], read by decoder row i
        at row memory_rows[i] (None: row i, N = B; see `FusedEncoderDecoderAttention`).
        Returns the new states and, when `need_weights`, the encoder-decoder attention
        weights [B, H, T, S]."""
        h = self.self_attn_block.open(x)
        h, _ = self.self_attn(h, key_padding_mask=self_padding_mask, causal=True, incremental_state=incremental_state)
        x = self.self_attn_block.close(x, h)
        h = self.cross_attn_block.open(x)
        h, weights = self.cross_attn(h, memory, memory_padding_mask, incremental_state, need_weights, memory_rows)
        x = self.cross_attn_block.close(x, h)
        return self.ffn_block.close(x, self.ffn(self.ffn_block.open(x))), weights
