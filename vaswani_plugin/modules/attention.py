"""Multi-head attention, §3.2 of "Attention Is All You Need" (plain PyTorch).

`scaled_dot_product` is Eq. 1, softmax(QK^T / sqrt(d_k)) V, as a pure function. The common path
hands it to `torch.nn.functional.scaled_dot_product_attention` with either no mask, `is_causal`,
or a boolean key-padding mask, so that the flash / memory-efficient kernels stay eligible on GPU
and no float -inf matrix is materialised. An explicit path computes the weights when a caller
asks for them (alignments, plots).

Initialisation (the paper specifies none) is fairseq's transformer's: see `init_input_projection_`;
W^O is xavier-uniform with a zero bias.

The two modules adapt it to the Transformer's two uses (§3.2.3):
- `FusedSelfAttention`: one packed [d, 3d] projection for Q, K and V (one GEMM instead of three);
- `FusedEncoderDecoderAttention`: Q from the decoder, one packed [d, 2d] projection for K and V
  from the encoder output.

Incremental decoding keeps per-module state inside the caller's `incremental_state` dict (fairseq's
convention) under a key unique to the module: the self-attention keys/values grow by one step at a
time in a buffer with spare capacity (no re-allocation per step); the encoder-decoder keys/values are
computed once per sentence. `reorder_incremental_state(state, new_order)` follows fairseq's beam
search contract, which moves every row every step: the self-attention cache gathers only its filled
steps, and the encoder-decoder keys/values are never moved (one copy per source sentence, shared by
its hypotheses through a row index; see `FusedEncoderDecoderAttention.start`).
"""
import itertools
from typing import Dict, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

_module_ids = itertools.count()


def scaled_dot_product(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    key_padding_mask: Optional[Tensor] = None,
    causal: bool = False,
    dropout_p: float = 0.0,
    need_weights: bool = False,
) -> Tuple[Tensor, Optional[Tensor]]:
    """Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V   (§3.2.1, Eq. 1).

    q: [B, H, T, d_k]; k, v: [B, H, S, d_k]; key_padding_mask: [B, S], True at padding.
    `causal` hides key j from query i when j > i (the decoder's §3.2.3 masking; needs T == S).
    Returns the output [B, H, T, d_k] and, when `need_weights`, the weights [B, H, T, S]
    (after dropout, i.e. the ones that multiplied V).

    A query that may look at no key at all (every key padding, e.g. an all-pad row) has no softmax
    in Eq. 1 (0/0); we define its weights and its output as zeros, with zero gradients, on every
    kernel, where a plain softmax over -inf would give NaN.
    """
    if causal and q.size(-2) != k.size(-2):
        raise ValueError(f"causal attention needs as many queries as keys, got {q.size(-2)} and {k.size(-2)}")
    allowed = None  # bool, True where a query may look; None means everywhere
    if key_padding_mask is not None:
        allowed = ~key_padding_mask[:, None, None, :]  # [B, 1, 1, S]
    if causal and (allowed is not None or need_weights):
        # SDPA's is_causal cannot be combined with a mask, and the explicit path needs the mask itself
        t = q.size(-2)
        future_hidden = torch.ones(t, t, dtype=torch.bool, device=q.device).tril()  # [T, S]
        allowed = future_hidden if allowed is None else allowed & future_hidden  # [B, 1, T, S]
    blind = None  # True for a query that may look at no key; only padding can cause it
    if key_padding_mask is not None:
        blind = ~allowed.any(dim=-1, keepdim=True)  # [B, 1, 1 or T, 1]
        allowed = allowed | blind  # let those rows look everywhere (finite), zeroed below; no sync
    if not need_weights:
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=allowed, dropout_p=dropout_p, is_causal=causal and allowed is None
        )
        return (out if blind is None else out.masked_fill(blind, 0.0)), None
    scores = torch.matmul(q, k.transpose(-2, -1)) * q.size(-1) ** -0.5  # [B, H, T, S]
    if allowed is not None:
        scores = scores.masked_fill(~allowed, float("-inf"))
    weights = torch.softmax(scores.float(), dim=-1).to(q.dtype)
    if blind is not None:
        weights = weights.masked_fill(blind, 0.0)
    weights = F.dropout(weights, p=dropout_p, training=dropout_p > 0)
    return torch.matmul(weights, v), weights


def init_input_projection_(proj: nn.Linear, blocks: int) -> None:
    """Initialise a Q, K or V projection as fairseq's MultiheadAttention does (the paper gives no
    initialisation): xavier-uniform weights with gain 1/sqrt(2), PyTorch's default uniform biases.
    A packed projection is initialised block by block, so it starts as the separate ones would.

    The gain matters: with gain 1, Q and K start sqrt(2) larger and the logits 2x larger, which
    learned ~0.3 nats less per update on Multi30k (issue 12)."""
    for block in proj.weight.data.chunk(blocks, dim=0):
        nn.init.xavier_uniform_(block, gain=2 ** -0.5)


class _MultiheadBase(nn.Module):
    """Head split/merge, the output projection W^O and the incremental-state key."""

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
        self._state_key = f"{type(self).__name__}.{next(_module_ids)}"

    def _split_heads(self, x: Tensor) -> Tensor:
        b, t, _ = x.shape
        return x.view(b, t, self.num_heads, self.head_dim).transpose(1, 2)  # [B, H, T, d_k]

    def _merge_heads(self, x: Tensor) -> Tensor:
        b, _, t, _ = x.shape
        return x.transpose(1, 2).reshape(b, t, self.embed_dim)  # [B, T, d]

    def _attend(self, q, k, v, key_padding_mask, causal, need_weights, step=False):
        out, weights = self._dot_product(q, k, v, key_padding_mask, causal, need_weights, step)
        return self.out_proj(self._merge_heads(out)), weights

    def _dot_product(self, q, k, v, key_padding_mask, causal, need_weights, step):
        """`step`: a decoding step (a few queries against a cache). On CPU, SDPA's kernel is then
        ~1.7x slower than the explicit matmul-softmax-matmul (measured, d_k 64, 1-4 queries against
        16-40 keys), so those steps take the explicit path and drop the weights."""
        p = self.dropout if self.training else 0.0
        explicit = need_weights or (step and q.device.type == "cpu")
        out, weights = scaled_dot_product(q, k, v, key_padding_mask, causal, p, explicit)
        return out, (weights if need_weights else None)

    def get_state(self, incremental_state: Dict) -> Optional[Dict[str, Tensor]]:
        return incremental_state.get(self._state_key)

    def reorder_incremental_state(self, incremental_state: Dict, new_order: Tensor):
        """Beam search moved hypotheses: row i of the new batch is row new_order[i] of the old."""
        state = self.get_state(incremental_state) if incremental_state is not None else None
        if state is not None:
            self._reorder_state(state, new_order)
        return incremental_state


class FusedSelfAttention(_MultiheadBase):
    """Self-attention with one packed QKV projection (§3.2.2: h heads of d_k = d_model / h)."""

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0):
        super().__init__(embed_dim, num_heads, dropout)
        self.qkv_proj = nn.Linear(embed_dim, 3 * embed_dim)
        init_input_projection_(self.qkv_proj, blocks=3)

    def forward(
        self,
        x: Tensor,
        key_padding_mask: Optional[Tensor] = None,
        causal: bool = False,
        incremental_state: Optional[Dict] = None,
        need_weights: bool = False,
    ) -> Tuple[Tensor, Optional[Tensor]]:
        """x: [B, T, d]. With `incremental_state`, x holds only the newest step(s) and attends to
        every step cached so far (causality holds by construction, so no mask is needed)."""
        q, k, v = self.qkv_proj(x).chunk(3, dim=-1)  # 3 x [B, T, d]
        q, k, v = self._split_heads(q), self._split_heads(k), self._split_heads(v)
        if incremental_state is not None:
            k, v = self._append_to_cache(incremental_state, k, v)
            causal = causal and q.size(-2) > 1 and q.size(-2) == k.size(-2)
        return self._attend(q, k, v, key_padding_mask, causal, need_weights, step=incremental_state is not None)

    def _append_to_cache(self, incremental_state: Dict, k: Tensor, v: Tensor) -> Tuple[Tensor, Tensor]:
        state = self.get_state(incremental_state)
        new = k.size(2)
        if state is None:
            b, h, _, d = k.shape
            capacity = max(16, 2 * new)
            state = {"k": k.new_empty(b, h, capacity, d), "v": v.new_empty(b, h, capacity, d), "length": 0}
            incremental_state[self._state_key] = state
        length = state["length"]
        if length + new > state["k"].size(2):
            # Double the capacity: amortised O(1) copies per step instead of a cat every step.
            grow = max(state["k"].size(2), new)
            state["k"] = torch.cat([state["k"], state["k"].new_empty(*k.shape[:2], grow, k.size(3))], dim=2)
            state["v"] = torch.cat([state["v"], state["v"].new_empty(*v.shape[:2], grow, v.size(3))], dim=2)
            state.pop("spare", None)
        state["k"][:, :, length:length + new] = k
        state["v"][:, :, length:length + new] = v
        state["length"] = length + new
        return state["k"][:, :, : length + new], state["v"][:, :, : length + new]

    def _reorder_state(self, state: Dict, new_order: Tensor) -> None:
        """Gather only the filled steps, into a second buffer of the same capacity that then swaps
        with the first (a beam step reorders every row, so nothing can be done in place)."""
        length, rows = state["length"], new_order.numel()
        if torch.is_grad_enabled() and state["k"].requires_grad:  # out= cannot record a graph
            state["k"], state["v"] = state["k"].index_select(0, new_order), state["v"].index_select(0, new_order)
            state["spare"] = None
            return
        spare = state.get("spare")
        if spare is None or spare[0].size(0) != rows:  # first reorder, or finished sentences left
            spare = tuple(state[n].new_empty(rows, *state[n].shape[1:]) for n in ("k", "v"))
        for name, out in zip(("k", "v"), spare):
            torch.index_select(state[name][:, :, :length], 0, new_order, out=out[:, :, :length])
        state["spare"] = (state["k"], state["v"]) if state["k"].size(0) == rows else None
        state["k"], state["v"] = spare


class FusedEncoderDecoderAttention(_MultiheadBase):
    """Encoder-decoder attention: queries from the decoder, one packed KV projection of the
    encoder output (§3.2.3)."""

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0):
        super().__init__(embed_dim, num_heads, dropout)
        self.q_proj = nn.Linear(embed_dim, embed_dim)
        self.kv_proj = nn.Linear(embed_dim, 2 * embed_dim)
        init_input_projection_(self.q_proj, blocks=1)
        init_input_projection_(self.kv_proj, blocks=2)

    def forward(
        self,
        x: Tensor,
        memory: Tensor,
        memory_padding_mask: Optional[Tensor] = None,
        incremental_state: Optional[Dict] = None,
        need_weights: bool = False,
    ) -> Tuple[Tensor, Optional[Tensor]]:
        """x: [B, T, d] decoder states; memory: [B, S, d] encoder output; mask [B, S]. With an
        `incremental_state` prepared by `start`, memory and mask are those given to `start`."""
        state = self.get_state(incremental_state) if incremental_state is not None else None
        if state is None:
            state = self.start(incremental_state, memory, memory_padding_mask)
        return self._attend_rows(self.q_proj(x), state, need_weights, step=incremental_state is not None)

    def start(self, incremental_state: Optional[Dict], memory: Tensor, memory_padding_mask: Optional[Tensor] = None,
              memory_rows: Optional[Tensor] = None) -> Dict:
        """Project the encoder output to K and V once per sentence (it is fixed while decoding).

        memory: [N, S, d], mask [N, S]; `memory_rows` [B] says which memory row each decoder row reads
        (None: row i reads memory[i]). Beam search thus keeps one K/V per source sentence for all of
        its hypotheses, and its reorders only move `rows`, never K/V (see `_reorder_state`)."""
        k, v = self.kv_proj(memory).chunk(2, dim=-1)  # 2 x [N, S, d]
        state = {"k": self._split_heads(k), "v": self._split_heads(v), "mask": memory_padding_mask}
        if memory_rows is None:
            state["rows"], state["group"] = None, 1
        else:
            self._set_rows(state, memory_rows)
        if incremental_state is not None:
            incremental_state[self._state_key] = state
        return state

    @staticmethod
    def _set_rows(state: Dict, rows: Tensor) -> None:
        """`group` = g when the rows are g consecutive hypotheses per memory row, in order (fairseq's
        layout: sentence-major, beam-minor); then a sentence's g queries attend to its K/V together,
        with no gather. 0 otherwise (any other order: K/V are gathered per row)."""
        n, b = state["k"].size(0), rows.numel()
        grouped = b % n == 0 and torch.equal(rows, torch.arange(n, device=rows.device).repeat_interleave(b // n))
        state["rows"], state["group"] = rows, (b // n if grouped else 0)

    def _reorder_state(self, state: Dict, new_order: Tensor) -> None:
        old = state["rows"]
        if old is None:
            old = torch.arange(state["k"].size(0), device=new_order.device)
        rows = old.index_select(0, new_order)  # [B'] memory row of each new decoder row
        if rows.numel() < old.numel():
            # Finished sentences left the batch: keep the K/V of the sentences still referred to.
            used, rows = torch.unique(rows, return_inverse=True)
            if used.numel() < state["k"].size(0):
                for name in ("k", "v", "mask"):
                    if state[name] is not None:
                        state[name] = state[name].index_select(0, used)
        self._set_rows(state, rows)

    def _attend_rows(self, q: Tensor, state: Dict, need_weights: bool, step: bool) -> Tuple[Tensor, Optional[Tensor]]:
        """q: [B, T, d] projected queries against the state's K/V [N, H, S, d_k]."""
        k, v, mask, group = state["k"], state["v"], state["mask"], state["group"]
        b, t, _ = q.shape
        if group:
            # [N, H, g*T, d_k]: the g hypotheses of a sentence are consecutive rows, so one view groups them
            q = q.view(k.size(0), group * t, self.num_heads, self.head_dim).transpose(1, 2)
        else:
            rows = state["rows"]
            k, v = k.index_select(0, rows), v.index_select(0, rows)  # [B, H, S, d_k]
            mask = None if mask is None else mask.index_select(0, rows)  # [B, S]
            q = self._split_heads(q)  # [B, H, T, d_k]
        out, weights = self._dot_product(q, k, v, mask, False, need_weights, step)  # [N or B, H, g*T or T, d_k]
        out = out.transpose(1, 2).reshape(b, t, self.embed_dim)  # [B, T, d]
        if weights is not None and group:
            weights = weights.view(k.size(0), self.num_heads, group, t, -1).transpose(1, 2)
            weights = weights.reshape(b, self.num_heads, t, weights.size(-1))  # [B, H, T, S]
        return self.out_proj(out), weights
