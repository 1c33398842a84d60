"""The grammar that `--constrained-decoding` enforces, as tensors: symbol classes, the search state, the mask.

Before every step the search sets to -inf the log-probability of each next token that would make the
linearized tree ill-formed, so that every finished hypothesis is a tree that `delinearize` reads back
with no repair (the scheme's `classify` says which symbol is what, see `parsing/schemes`):

- the first token opens the root phrase; after the root closes, only EOS (and EOS only then);
- a closing bracket only for the innermost open label, and only once that phrase holds something;
- exactly as many pre-terminals as source words: no pre-terminal and no new phrase once all words
  are covered, and the root closes only when they are;
- a length guard: a token is allowed only if the tree can still be finished (the remaining
  pre-terminals plus one closing bracket per open phrase) before the generator's length limit.

:class:`ParseState` is what the mask needs of each hypothesis (depth, pre-terminals so far, the open
labels, whether the last token opened a phrase). It is carried from step to step: each chosen token
advances its parent's state in O(1), and the beams' reordering is an index into the rows. The open
labels are a persistent stack, nodes (closing id, parent node) in one append-only :class:`LabelStack`
table shared by all hypotheses of a batch, so a row holds only a pointer to its innermost open label
and copying a hypothesis copies no stack. Words are counted from the source pieces: every
sentencepiece piece that starts a word begins with U+2581.
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from ..parsing.prepare import WORD_START
from ..parsing.schemes import CLOSE, OPEN, PRETERMINAL, get_scheme


def word_start_mask(src_dict) -> Tensor:
    """[len(src_dict)] bool: True for the source pieces that start a word."""
    return torch.tensor([i >= src_dict.nspecial and sym.startswith(WORD_START)
                         for i, sym in enumerate(src_dict.symbols)], dtype=torch.bool)


def count_words(src_tokens: Tensor, word_start: Tensor) -> Tensor:
    """[B, S] source tokens -> [B] number of words (pads and EOS are never word starts)."""
    return word_start.to(src_tokens.device)[src_tokens].long().sum(1)


class TargetSymbols:
    """The target dictionary's symbols sorted by the scheme: opening and closing brackets, pre-terminals."""

    def __init__(self, tgt_dict, scheme="vinyals"):
        scheme = get_scheme(scheme)
        size = len(tgt_dict)
        self.is_open = torch.zeros(size, dtype=torch.bool)
        self.is_close = torch.zeros(size, dtype=torch.bool)
        self.is_pre = torch.zeros(size, dtype=torch.bool)
        self.close_of = torch.full((size,), -1, dtype=torch.long)  # open id -> id of its closing bracket
        for index, symbol in enumerate(tgt_dict.symbols):
            if index < tgt_dict.nspecial or symbol.startswith("madeupword"):
                continue  # <s> <pad> </s> <unk> and fairseq's padding symbols are never part of a tree
            kind, label = scheme.classify(symbol)
            if kind == CLOSE and label:
                self.is_close[index] = True
            elif kind == OPEN and label:
                closing = scheme.close_token(label)
                if closing in tgt_dict.indices:  # a label that could never be closed is never opened
                    self.is_open[index] = True
                    self.close_of[index] = tgt_dict.indices[closing]
            elif kind == PRETERMINAL:
                self.is_pre[index] = True
        if not self.is_open.any() or not self.is_pre.any():
            raise ValueError("the target dictionary has no opening brackets or no pre-terminals: "
                             "is it a constituency parsing dictionary?")

    def to(self, device) -> "TargetSymbols":
        for name in ("is_open", "is_close", "is_pre", "close_of"):
            setattr(self, name, getattr(self, name).to(device))
        return self


class LabelStack:
    """Append-only nodes (closing id, parent node) of the open-label stacks of a batch; node 0 is the
    empty stack (closing id -1, its own parent)."""

    def __init__(self, device=None, capacity: int = 1024):
        self.close = torch.full((capacity,), -1, dtype=torch.long, device=device)
        self.parent = torch.zeros(capacity, dtype=torch.long, device=device)
        self.size = 1

    def push(self, parents: Tensor, close_ids: Tensor) -> Tensor:
        """New nodes on top of ``parents`` ([M] node ids) -> their [M] node ids."""
        count = parents.numel()
        while self.size + count > self.close.numel():  # doubling keeps pushes amortised O(1)
            self.close = torch.cat([self.close, torch.full_like(self.close, -1)])
            self.parent = torch.cat([self.parent, torch.zeros_like(self.parent)])
        nodes = torch.arange(self.size, self.size + count, device=parents.device)
        self.close[nodes] = close_ids
        self.parent[nodes] = parents
        self.size += count
        return nodes


class ParseState:
    """Per hypothesis ([N] rows): depth, pre-terminals written, innermost open label (a LabelStack node),
    whether the last token opened a phrase; ``length`` tokens written so far (the same for every row)."""

    def __init__(self, depth: Tensor, preterminals: Tensor, top: Tensor, last_was_open: Tensor, length: int,
                 stack: LabelStack):
        self.depth, self.preterminals, self.top, self.last_was_open = depth, preterminals, top, last_was_open
        self.length = length
        self.stack = stack

    @classmethod
    def initial(cls, rows: int, device=None, stack: Optional[LabelStack] = None) -> "ParseState":
        zero = torch.zeros(rows, dtype=torch.long, device=device)
        return cls(zero, zero.clone(), zero.clone(), torch.zeros(rows, dtype=torch.bool, device=device), 0,
                   stack if stack is not None else LabelStack(device))

    @property
    def rows(self) -> int:
        return self.depth.numel()

    @property
    def inner_close(self) -> Tensor:
        """[N] the id of the token that closes the innermost open phrase (-1: none open)."""
        return self.stack.close[self.top]

    def select(self, rows: Tensor) -> "ParseState":
        """The states of ``rows`` (a reordering, a subset or repeats), sharing the label stack."""
        return ParseState(self.depth[rows], self.preterminals[rows], self.top[rows], self.last_was_open[rows],
                          self.length, self.stack)

    def advance(self, symbols: TargetSymbols, parents: Tensor, tokens: Tensor) -> "ParseState":
        """The states after writing ``tokens`` ([M]) after the hypotheses ``parents`` ([M] rows of this
        state). Tokens outside the tree grammar (EOS, padding) change nothing."""
        opens, closes = symbols.is_open[tokens], symbols.is_close[tokens]
        top = self.top[parents]
        pushed = top.clone()
        if opens.any():
            pushed[opens] = self.stack.push(top[opens], symbols.close_of[tokens[opens]])
        pushed = torch.where(closes, self.stack.parent[top], pushed)
        return ParseState(self.depth[parents] + opens.long() - closes.long(),
                          self.preterminals[parents] + symbols.is_pre[tokens].long(), pushed, opens,
                          self.length + 1, self.stack)


def allowed_next_tokens(symbols: TargetSymbols, state: ParseState, words: Tensor, max_len: int, eos: int) -> Tensor:
    """[N, V] bool: the tokens that keep each hypothesis on the way to a well-formed tree.

    words: [N] source word counts; max_len: the most tokens before EOS."""
    rows, t = state.rows, state.length
    depth, last_was_open, inner_close = state.depth, state.last_was_open, state.inner_close
    left = words - state.preterminals  # pre-terminals still to write
    used = t + 1  # tokens once this step's token is written
    started = t > 0
    none = torch.zeros(rows, dtype=torch.bool, device=depth.device)
    complete = (depth == 0) if started else none
    can_open = ~complete & (left > 0) & (used + left + depth + 1 <= max_len)
    if started:
        inside = depth > 0
        can_pre = inside & (left > 0) & (used + left - 1 + depth <= max_len)
        can_close = inside & ~last_was_open & ((depth > 1) | (left == 0)) & (inner_close >= 0) \
            & (used + left + depth - 1 <= max_len)
        can_eos = complete
    else:
        can_pre = can_close = none
        can_eos = words == 0  # nothing to parse
    allowed = (can_open.unsqueeze(1) & symbols.is_open.unsqueeze(0)) | \
              (can_pre.unsqueeze(1) & symbols.is_pre.unsqueeze(0))
    closing_rows = can_close.nonzero().squeeze(1)
    allowed[closing_rows, inner_close[closing_rows]] = True
    allowed[:, eos] = can_eos
    # Only if the length limit cannot hold a tree at all (the generator prevents it): let it end.
    stuck = ~allowed.any(1)
    allowed[stuck, eos] = True
    return allowed
