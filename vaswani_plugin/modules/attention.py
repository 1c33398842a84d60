"""Multi-head attention, §3.2 of "Attention Is All You Need" (plain PyTorch).

    MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O,  head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V)

with h heads of d_k = d_v = d_model / h (§3.2.2) and Attention of Eq. 1 (`scaled_dot_product`, in
`attention_kernels`, which also picks the kernel). The modules adapt it to the Transformer's uses
(§3.2.3); the W_i of all heads are one [d, d] matrix per Q, K and V, packed where they share an input:
- `FusedSelfAttention`: Q, K and V from the same x, one [d, 3d] projection (one GEMM instead of three);
- `FusedEncoderDecoderAttention`: Q from the decoder, K and V from the encoder output, [d, 2d].

Initialisation (the paper specifies none) is fairseq's transformer's: see `init_input_projection_`;
W^O is xavier-uniform with a zero bias.

Incremental decoding (speed only) keeps K and V between steps in the caches of `attention_cache`.
"""
from typing import Dict, Optional, Tuple

from torch import Tensor, nn

from .attention_cache import CacheSlot, MemoryCache, SelfAttentionCache
from .attention_kernels import scaled_dot_product


def init_input_projection_(proj: nn.Linear, blocks: int) -> None:
    """Initialise a Q, K or V projection as fairseq's MultiheadAttention does (the paper gives no
    initialisation): xavier-uniform weights with gain 1/sqrt(2), PyTorch's default uniform biases.
    A packed projection is initialised block by block, so it starts as the separate ones would.

    The gain matters: with gain 1, Q and K start sqrt(2) larger and the logits 2x larger, which
    learned ~0.3 nats less per update on Multi30k (issue 12)."""
    for block in proj.weight.data.chunk(blocks, dim=0):
        nn.init.xavier_uniform_(block, gain=2 ** -0.5)


class _MultiheadBase(nn.Module):
    """Head split/merge, the output projection W^O and the module's cache slot."""

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0):
        super().__init__()
        if embed_dim % num_heads != 0:
            raise ValueError(f"embed_dim ({embed_dim}) must be divisible by num_heads ({num_heads})")
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        self.dropout = dropout
        self.out_proj = nn.Linear(embed_dim, embed_dim)
        nn.init.xavier_uniform_(self.out_proj.weight)
        nn.init.zeros_(self.out_proj.bias)
        self.cache = CacheSlot(type(self).__name__)

    def _split_heads(self, x: Tensor) -> Tensor:
        b, t, _ = x.shape
        return x.view(b, t, self.num_heads, self.head_dim).transpose(1, 2)  # [B, H, T, d_k]

    def _merge_heads(self, x: Tensor, b: int, t: int) -> Tensor:
        return x.transpose(1, 2).reshape(b, t, self.embed_dim)  # [B, T, d]

    def _dropout_p(self) -> float:
        return self.dropout if self.training else 0.0

    def reorder_incremental_state(self, incremental_state: Dict, new_order: Tensor):
        """Beam search moved hypotheses: row i of the new batch is row new_order[i] of the old."""
        cache = self.cache.get(incremental_state)
        if cache is not None:
            cache.reorder(new_order)
        return incremental_state


class FusedSelfAttention(_MultiheadBase):
    """Self-attention with one packed QKV projection (§3.2.2, §3.2.3)."""

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0):
        super().__init__(embed_dim, num_heads, dropout)
        self.qkv_proj = nn.Linear(embed_dim, 3 * embed_dim)
        init_input_projection_(self.qkv_proj, blocks=3)

    def forward(self, x: Tensor, key_padding_mask: Optional[Tensor] = None, causal: bool = False,
                incremental_state: Optional[Dict] = None, need_weights: bool = False
                ) -> Tuple[Tensor, Optional[Tensor]]:
        """x: [B, T, d]. With `incremental_state`, x holds the newest T steps, which attend to every
        step cached so far and, with `causal`, to the new ones up to themselves."""
        b, t, _ = x.shape
        q, k, v = (self._split_heads(p) for p in self.qkv_proj(x).chunk(3, dim=-1))  # 3 x [B, H, T, d_k]
        step = incremental_state is not None
        if step:
            cache = self.cache.get(incremental_state)
            if cache is None:
                cache = self.cache.put(incremental_state, SelfAttentionCache())
            k, v = cache.append(k, v)  # 2 x [B, H, S, d_k], S = steps so far
        out, weights = scaled_dot_product(q, k, v, key_padding_mask, causal, self._dropout_p(), need_weights, step)
        return self.out_proj(self._merge_heads(out, b, t)), weights  # [B, T, d]


class FusedEncoderDecoderAttention(_MultiheadBase):
    """Encoder-decoder attention: queries from the decoder, keys and values from the encoder output
    through one packed KV projection (§3.2.3)."""

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0):
        super().__init__(embed_dim, num_heads, dropout)
        self.q_proj = nn.Linear(embed_dim, embed_dim)
        self.kv_proj = nn.Linear(embed_dim, 2 * embed_dim)
        init_input_projection_(self.q_proj, blocks=1)
        init_input_projection_(self.kv_proj, blocks=2)

    def forward(self, x: Tensor, memory: Tensor, memory_padding_mask: Optional[Tensor] = None,
                incremental_state: Optional[Dict] = None, need_weights: bool = False,
                memory_rows: Optional[Tensor] = None) -> Tuple[Tensor, Optional[Tensor]]:
        """x: [B, T, d] decoder states; memory: [N, S, d] encoder output, mask [N, S]; memory_rows [B]:
        the memory row each decoder row reads (None: row i reads row i, N = B). With an
        `incremental_state`, K and V are projected at the first step only (`MemoryCache`)."""
        b, t, _ = x.shape
        cache = self.cache.get(incremental_state)
        if cache is None:
            k, v = self.kv_proj(memory).chunk(2, dim=-1)  # 2 x [N, S, d]
            cache = MemoryCache(self._split_heads(k), self._split_heads(v), memory_padding_mask, memory_rows)
            self.cache.put(incremental_state, cache)
        q, k, v, mask = cache.arrange(self.q_proj(x), self.num_heads)  # per sentence or per row, see arrange
        out, weights = scaled_dot_product(q, k, v, mask, False, self._dropout_p(), need_weights,
                                          decoding_step=incremental_state is not None)
        return self.out_proj(self._merge_heads(out, b, t)), cache.weights_per_row(weights, b, t)
