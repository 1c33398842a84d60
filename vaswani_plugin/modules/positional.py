"""Sinusoidal positional encodings, §3.5.

Two layouts, chosen by name because checkpoints of fairseq's own transformer use the second:
- "paper": PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d_model)),
  sines and cosines interleaved, the first real token at position 0;
- "fairseq": fairseq's SinusoidalPositionalEmbedding: all sines then all cosines, frequencies
  10000^(-j/(d/2 - 1)), the first real token at position padding_idx + 1.
Padding never moves the positions of real tokens: they are counted from each row's first
non-padding token, so left-padded sources get the same encodings as unpadded ones.
"""
import math

import torch
from torch import Tensor, nn

LAYOUTS = ("paper", "fairseq")


def sinusoid_table(num_positions: int, dim: int, layout: str = "paper") -> Tensor:
    """[num_positions, dim] float32 table; row p encodes position p."""
    pos = torch.arange(num_positions, dtype=torch.float64)[:, None]  # [P, 1]
    if layout == "paper":
        two_i = torch.arange(0, dim, 2, dtype=torch.float64)  # [ceil(d/2)]
        angle = pos / 10000.0 ** (two_i / dim)  # [P, ceil(d/2)]
        table = torch.zeros(num_positions, dim, dtype=torch.float64)
        table[:, 0::2] = torch.sin(angle)
        table[:, 1::2] = torch.cos(angle[:, : dim // 2])
    elif layout == "fairseq":
        half = dim // 2
        freq = torch.exp(torch.arange(half, dtype=torch.float64) * -(math.log(10000.0) / (half - 1)))
        angle = pos * freq  # [P, d/2]
        table = torch.cat([torch.sin(angle), torch.cos(angle), torch.zeros(num_positions, dim % 2)], dim=1)
    else:
        raise ValueError(f"unknown positional layout {layout!r}; expected one of {LAYOUTS}")
    return table.float()


class SinusoidalPositions(nn.Module):
    """Adds nothing learnable; returns the encodings for a batch of token ids.

    The table is grown on demand, so sequences longer than any seen in training still get their
    sinusoids (the extrapolation §3.5 argues for). It is a non-persistent buffer: checkpoints do not
    carry it.
    """

    def __init__(self, dim: int, padding_idx: int, layout: str = "paper", initial_size: int = 1024):
        super().__init__()
        if layout not in LAYOUTS:
            raise ValueError(f"unknown positional layout {layout!r}; expected one of {LAYOUTS}")
        self.dim, self.padding_idx, self.layout = dim, padding_idx, layout
        self.offset = 0 if layout == "paper" else padding_idx + 1
        self.register_buffer("table", sinusoid_table(initial_size + self.offset, dim, layout), persistent=False)

    def positions(self, tokens: Tensor, last_step_only: bool = False) -> Tensor:
        """[B, T] index of each token among its row's real tokens (0 for the first); [B, 1] for the
        newest token only (a decoding step: a count, not a running sum over the prefix)."""
        real = tokens.ne(self.padding_idx)
        counts = real.sum(dim=1, keepdim=True) if last_step_only else torch.cumsum(real, dim=1)
        return (counts - 1).clamp_(min=0)

    def forward(self, tokens: Tensor, last_step_only: bool = False) -> Tensor:
        """tokens [B, T] -> encodings [B, T, d] (or [B, 1, d] for the newest step)."""
        pos = self.positions(tokens, last_step_only) + self.offset
        self._cover(tokens.size(1) + self.offset)  # positions never exceed the row length (no device sync)
        return self.table[pos]

    def at(self, position: int) -> Tensor:
        """[d]: the encoding of one position, for a decoding step whose rows all hold position+1
        real tokens (a beam search's: none is padding)."""
        self._cover(position + self.offset + 1)
        return self.table[position + self.offset]

    def _cover(self, needed: int) -> None:
        if needed > self.table.size(0):
            grown = sinusoid_table(max(needed, 2 * self.table.size(0)), self.dim, self.layout)
            self.table = grown.to(device=self.table.device, dtype=self.table.dtype)
