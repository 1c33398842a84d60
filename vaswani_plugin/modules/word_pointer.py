"""Which source word a parsing decoder is at: the positions behind `--arch vaswani_pointer_parser`.

In a bracketed linearization every word is written as exactly one pre-terminal token, so the number
of pre-terminals in a target prefix is the number of words that prefix has covered; the next
pre-terminal belongs to the next word. These functions turn that count into a source position, so
that the decoder can read the encoder state of the word it is about to cover (the deterministic
attention of Liu, Zhu and Shi, 2018). Plain tensor maths, no learned parameters.
"""
import torch
from torch import Tensor


def word_start_table(src_tokens: Tensor, word_start: Tensor, eos: int) -> Tensor:
    """[B, S] source tokens -> [B, S] positions: entry k is the position of the first piece of word k;
    every entry from the word count on is the position of the row's EOS (where "no word left" points).

    word_start: [V] bool, True for the pieces that begin a word (pads and EOS never do). Left or
    right padding alike (fairseq pads the source on the left by default)."""
    bsz, src_len = src_tokens.shape
    starts = word_start.to(src_tokens.device)[src_tokens]  # [B, S]
    position = torch.arange(src_len, device=src_tokens.device).expand(bsz, src_len)  # [B, S]
    # Word starts first, in order, then every other position: a stable sort on "is not a start".
    order = torch.sort((~starts).to(torch.uint8), dim=1, stable=True).indices  # [B, S]
    eos_position = src_tokens.eq(eos).to(torch.uint8).argmax(dim=1, keepdim=True)  # [B, 1], first EOS
    words = starts.sum(dim=1, keepdim=True)  # [B, 1]
    return torch.where(position < words, order, eos_position.expand(bsz, src_len))  # [B, S]


def covered_words(prev_output_tokens: Tensor, is_preterminal: Tensor, last_only: bool = False) -> Tensor:
    """[B, T] decoder inputs (EOS, y_1 .. y_{T-1}) -> [B, T]: at input position t, the number of
    pre-terminals among y_1 .. y_t, i.e. the index of the next word to cover. With `last_only`
    (an incremental decoding step) just the newest position, [B, 1], as one sum."""
    preterminals = is_preterminal.to(prev_output_tokens.device)[prev_output_tokens].long()  # [B, T]
    return preterminals.sum(dim=1, keepdim=True) if last_only else preterminals.cumsum(dim=1)


def pointed_positions(table: Tensor, covered: Tensor) -> Tensor:
    """table [B, S] (:func:`word_start_table`), covered [B, T] -> [B, T] source positions; counts past
    the last word (a prefix with more pre-terminals than words) point at EOS too."""
    return table.gather(1, covered.clamp(max=table.size(1) - 1))
