"""The input of either stack: token embedding, scaling, positions, dropout (§3.4, §3.5, §5.4)."""
import math

from torch import Tensor, nn

from .dropout import dropout
from .positional import SinusoidalPositions


class ScaledEmbedding(nn.Module):
    """Dropout(sqrt(d_model) * E[token] + PE(position)).

    `embed_tokens` is passed in so that the encoder, the decoder and the pre-softmax projection can
    share one matrix (§3.4).
    """

    def __init__(self, embed_tokens: nn.Embedding, positional_layout: str = "paper", dropout: float = 0.0):
        super().__init__()
        d_model = embed_tokens.embedding_dim
        self.embed_tokens = embed_tokens
        self.scale = math.sqrt(d_model)
        self.positions = SinusoidalPositions(d_model, embed_tokens.padding_idx, positional_layout)
        self.dropout = dropout

    def forward(self, tokens: Tensor, last_step_only: bool = False) -> Tensor:
        """tokens [B, T] -> [B, T, d_model]; with `last_step_only`, just the newest position [B, 1, d]."""
        pos = self.positions(tokens, last_step_only=last_step_only)
        if last_step_only:
            tokens = tokens[:, -1:]
        x = self.embed_tokens(tokens) * self.scale + pos
        return dropout(x, self.dropout, self.training)  # F.dropout, cheaper masks on CPU (modules.dropout)
