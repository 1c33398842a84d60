"""What the attention modules keep between decoding steps (speed only; plain PyTorch).

Incremental decoding stores one cache per attention module in the caller's `incremental_state` dict
(fairseq's convention), under a key unique to the module (`CacheSlot`). Beam search then calls
`reorder(new_order)`: row i of the new batch is row new_order[i] of the old. fairseq's contract
moves every row every step, so each cache here makes that move cheap:

- `SelfAttentionCache`: the keys and values of every step so far, in a buffer with spare capacity
  (doubled when full: no re-allocation per step); a reorder gathers only the filled steps, into a
  second buffer that then swaps with the first.
- `MemoryCache`: the encoder-decoder attention's K and V, projected once per sentence and never
  moved: beam search's reorders only move `rows` (decoder row -> source sentence), and when the rows
  are fairseq's layout (each sentence's g hypotheses consecutive) the g queries of a sentence attend
  to its K/V together, with no gather at all. The encoder's `reorder_encoder_out` composes the
  reorders into "memory_rows", which the decoder hands to every layer: those are the first `rows`.

The lean beam search (`models.beam_search`) keeps that layout itself and decodes with its own step
(`decoding_step`), which keeps the self-attention's keys and values still too
(`BeamSelfAttentionCache`): the keys of a sentence's hypotheses stay where they were computed,
each hypothesis's query attends to all of them, and a mask hides the keys that are not its
ancestors' (`BeamAncestry`, one for the whole decoder). A step then moves the mask, [rows, steps x
beam] booleans, instead of every layer's K and V, [rows, H, steps, d_k] floats each, which cost
more than the attention that reads them.
"""
import itertools
from typing import Dict, Optional, Tuple

import torch
from torch import Tensor

from . import decoding_kernels

_slot_ids = itertools.count()


class CacheSlot:
    """The key under which one module keeps its cache in fairseq's `incremental_state` dict."""

    def __init__(self, owner: str):
        self.key = f"{owner}.{next(_slot_ids)}"

    def get(self, incremental_state: Optional[Dict]):
        return None if incremental_state is None else incremental_state.get(self.key)

    def put(self, incremental_state: Optional[Dict], cache):
        if incremental_state is not None:
            incremental_state[self.key] = cache
        return cache


class SelfAttentionCache:
    """k, v: [B, H, capacity, d_k], of which the first `length` steps are filled."""

    def __init__(self):
        self.k = self.v = None
        self.length = 0
        self.spare = None  # the second buffer a reorder writes into, once it exists

    def append(self, k: Tensor, v: Tensor) -> Tuple[Tensor, Tensor]:
        """Add the newest step(s) k, v [B, H, T, d_k]; -> every step so far, 2 x [B, H, length, d_k]."""
        new = k.size(2)
        if self.k is None:
            b, h, _, d = k.shape
            capacity = max(16, 2 * new)
            self.k, self.v = k.new_empty(b, h, capacity, d), v.new_empty(b, h, capacity, d)
        elif self.length + new > self.k.size(2):
            # Double the capacity: amortised O(1) copies per step instead of a cat every step.
            grow = max(self.k.size(2), new)
            self.k = torch.cat([self.k, self.k.new_empty(*k.shape[:2], grow, k.size(3))], dim=2)
            self.v = torch.cat([self.v, self.v.new_empty(*v.shape[:2], grow, v.size(3))], dim=2)
            self.spare = None
        self.k[:, :, self.length:self.length + new] = k
        self.v[:, :, self.length:self.length + new] = v
        self.length += new
        return self.k[:, :, :self.length], self.v[:, :, :self.length]

    def reorder(self, new_order: Tensor) -> None:
        length, rows = self.length, new_order.numel()
        if torch.is_grad_enabled() and self.k.requires_grad:  # out= cannot record a graph
            self.k, self.v = self.k.index_select(0, new_order), self.v.index_select(0, new_order)
            self.spare = None
            return
        spare = self.spare
        if spare is None or spare[0].size(0) != rows:  # first reorder, or finished sentences left
            spare = (self.k.new_empty(rows, *self.k.shape[1:]), self.v.new_empty(rows, *self.v.shape[1:]))
        torch.index_select(self.k[:, :, :length], 0, new_order, out=spare[0][:, :, :length])
        torch.index_select(self.v[:, :, :length], 0, new_order, out=spare[1][:, :, :length])
        self.spare = (self.k, self.v) if self.k.size(0) == rows else None
        self.k, self.v = spare


class BeamAncestry:
    """Which cached keys each hypothesis may attend to, for a search that keeps each live sentence's
    hypotheses in consecutive rows, slot j of sentence n in row n * group + j (group: 1 at the first
    step, the beam after it). The key fed in at step t by slot j of a sentence sits at column
    t * beam + j of that sentence's keys; visible [rows, steps, beam] is True at (t, j) where that
    slot at step t held an ancestor of the row's hypothesis (or the hypothesis itself, at the
    newest step). The search calls `follow` once per step, for every layer's cache. `bias` makes
    the scores' mask from it; the C decoder layer (`decoding_kernels.bound_decoder_layer`) reads
    `visible` itself."""

    def __init__(self, rows: int, beam: int, device=None):
        self.beam, self.group, self.length = beam, 1, 1
        self._own = torch.eye(beam, dtype=torch.bool, device=device)  # the newest step: each row its own slot
        self.visible = torch.zeros(rows * beam, 16, beam, dtype=torch.bool, device=device)
        self.visible[:rows, 0, 0] = True  # the first step: one row per sentence, in slot 0
        self.rows = rows
        self._bias = None
        self._spare = None  # `follow`'s second buffer, where C writes the next step's `visible`

    def bias(self, heads: int, dtype: torch.dtype) -> Tensor:
        """[N * heads, group, length * beam]: 0 where a row's query may look, -inf elsewhere, to add to
        its attention scores (made once a step, for every layer)."""
        if self._bias is None or self._bias.dtype != dtype:
            hidden = ~self.visible[:self.rows, :self.length].reshape(-1, 1, self.group, self.length * self.beam)
            bias = torch.zeros(hidden.shape, dtype=dtype, device=hidden.device).masked_fill_(hidden, float("-inf"))
            self._bias = bias.expand(-1, heads, -1, -1).reshape(-1, self.group, self.length * self.beam)
        return self._bias

    def follow(self, parents: Tensor, group: int) -> None:
        """Row i of the next step continues row parents[i] of this one (a row of the same sentence)
        and holds slot i % group."""
        rows, length = parents.numel(), self.length
        if length == self.visible.size(1):
            self.visible = torch.cat([self.visible, torch.zeros_like(self.visible)], dim=1)
        if self.visible.device.type == "cpu" and decoding_kernels.available():  # one C pass into a spare
            if self._spare is None or self._spare.shape != self.visible.shape:
                self._spare = torch.empty_like(self.visible)
            decoding_kernels.follow_ancestry(self.visible, self._spare, parents, length, group)
            self.visible, self._spare = self._spare, self.visible
        else:
            visible = self.visible[:self.rows, :length].index_select(0, parents)  # [rows', length, beam]
            self.visible[:rows, :length] = visible
            self.visible[:rows, length].view(-1, group, self.beam).copy_(self._own[:group])
        self.rows, self.group, self.length = rows, group, length + 1
        self._bias = None


class BeamSelfAttentionCache:
    """One layer's self-attention K and V for `BeamAncestry`'s layout: [N, H, capacity x beam, d_k],
    one block per live sentence, never moved by a reorder."""

    def __init__(self, ancestry: BeamAncestry):
        self.ancestry = ancestry
        self.k = self.v = None
        self.filled = 0  # columns written so far: beam per step

    def append(self, k: Tensor, v: Tensor) -> Tuple[Tensor, Tensor]:
        """k, v [N, H, group, d_k] of the newest step -> the sentences' keys and values so far, 2 x
        [N, H, length x beam, d_k] (columns as in `BeamAncestry`): views of the cache, not copies."""
        n, h, group, d = k.shape
        column = self.reserve(n, h, d, k)
        self.k[:, :, column:column + group] = k
        self.v[:, :, column:column + group] = v
        return self.k[:, :, :self.filled], self.v[:, :, :self.filled]

    def reserve(self, n: int, heads: int, d_k: int, like: Tensor) -> int:
        """Room for the newest step (the cache made like `like`, or grown) -> the first of its columns,
        where the caller writes its keys and values into `k` and `v`; `filled` counts them already."""
        beam, step = self.ancestry.beam, self.ancestry.length - 1
        if self.k is None:
            self.k, self.v = (like.new_empty(n, heads, 16 * beam, d_k) for _ in range(2))
            # The first step fills slot 0 only; the others stay masked, but 0 x garbage V could be NaN.
            self.k[:, :, 1:beam], self.v[:, :, 1:beam] = 0, 0
        elif (step + 1) * beam > self.k.size(2):  # double the capacity; new columns are written before read
            self.k, self.v = (self._doubled(t) for t in (self.k, self.v))
        self.filled = (step + 1) * beam
        return step * beam

    def _doubled(self, t: Tensor) -> Tensor:
        """t with twice its columns, the filled ones copied (a cat with an empty block made that block
        first, then copied it too)."""
        out = t.new_empty(t.size(0), t.size(1), 2 * t.size(2), t.size(3))
        out[:, :, :self.filled] = t[:, :, :self.filled]
        return out

    def keep_sentences(self, sentences: Tensor) -> None:
        """Only the K/V of `sentences` (increasing) from now on, in that order: moved down in place by C
        where it takes the cache (`decoding_kernels.compact_sentences`), else copied into new tensors."""
        if decoding_kernels.takes(self.k):
            self.k, self.v = (decoding_kernels.compact_sentences(t, sentences, self.filled) for t in (self.k, self.v))
        else:
            self.k, self.v = (self._filled_rows(t, sentences) for t in (self.k, self.v))

    def _filled_rows(self, t: Tensor, sentences: Tensor) -> Tensor:
        out = t.new_empty(sentences.numel(), *t.shape[1:])
        torch.index_select(t[:, :, :self.filled], 0, sentences, out=out[:, :, :self.filled])
        return out


class MemoryCache:
    """k, v: [N, H, S, d_k], one per source sentence; mask [N, S] (True at padding) or None;
    rows [B]: the sentence each decoder row reads (None: row i reads sentence i)."""

    def __init__(self, k: Tensor, v: Tensor, mask: Optional[Tensor], rows: Optional[Tensor] = None):
        self.k, self.v, self.mask = k, v, mask
        self._set_rows(rows)

    def _set_rows(self, rows: Optional[Tensor]) -> None:
        """`group` = g when the rows are g consecutive hypotheses per sentence, in order (fairseq's
        layout: sentence-major, beam-minor; None rows: g = 1); then a sentence's g queries attend to
        its K/V together, with no gather. 0 otherwise (any other order: K/V are gathered per row)."""
        self.rows, self.group = rows, 1
        if rows is not None:
            n, b = self.k.size(0), rows.numel()
            grouped = b % n == 0 and torch.equal(rows, torch.arange(n, device=rows.device).repeat_interleave(b // n))
            self.group = b // n if grouped else 0

    def reorder(self, new_order: Tensor) -> None:
        old = self.rows if self.rows is not None else torch.arange(self.k.size(0), device=new_order.device)
        rows = old.index_select(0, new_order)  # [B'] sentence of each new decoder row
        if rows.numel() < old.numel():
            # Finished sentences left the batch: keep the K/V of the sentences still referred to.
            used, rows = torch.unique(rows, return_inverse=True)
            if used.numel() < self.k.size(0):
                self.k, self.v = self.k.index_select(0, used), self.v.index_select(0, used)
                self.mask = None if self.mask is None else self.mask.index_select(0, used)
        self._set_rows(rows)

    def arrange(self, q: Tensor, num_heads: int) -> Tuple[Tensor, Tensor, Tensor, Optional[Tensor]]:
        """Projected queries q [B, T, d] -> (q, k, v, mask) for the kernel: grouped, q [N, H, g*T, d_k]
        against k, v [N, H, S, d_k] and mask [N, S]; else per row, [B, H, T, d_k] against [B, H, S, d_k]
        and [B, S]. Either way `out.transpose(1, 2).reshape(B, T, d)` restores the decoder's rows."""
        b, t, d = q.shape
        if self.group:
            q = q.view(self.k.size(0), self.group * t, num_heads, d // num_heads).transpose(1, 2)
            return q, self.k, self.v, self.mask
        q = q.view(b, t, num_heads, d // num_heads).transpose(1, 2)  # [B, H, T, d_k]
        mask = None if self.mask is None else self.mask.index_select(0, self.rows)  # [B, S]
        return q, self.k.index_select(0, self.rows), self.v.index_select(0, self.rows), mask

    def weights_per_row(self, weights: Optional[Tensor], b: int, t: int) -> Optional[Tensor]:
        """The kernel's weights, arranged as `arrange` laid the queries out -> [B, H, T, S]."""
        if weights is None or not self.group:
            return weights
        h, s = weights.size(1), weights.size(-1)
        weights = weights.view(self.k.size(0), h, self.group, t, s).transpose(1, 2)  # [N, g, H, T, S]
        return weights.reshape(b, h, t, s)
