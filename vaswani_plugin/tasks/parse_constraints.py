"""Constrained decoding for `--task constituency_parsing --constrained-decoding`.

A beam search (a subclass of fairseq's `BeamSearch`) that, before every step, sets to -inf the
log-probability of each next token that would make the linearized tree ill-formed, so that every
finished hypothesis is a well-formed tree that `delinearize` reads back with no repair:

- the first token opens the root phrase; after the root closes, only EOS (and EOS only then);
- a closing bracket only for the innermost open label, and only once that phrase holds something;
- exactly as many pre-terminals (XX or tags) as source words: no pre-terminal and no new phrase once
  all words are covered, and the root closes only when they are;
- a length guard: a token is allowed only if the tree can still be finished (the remaining
  pre-terminals plus one closing bracket per open phrase) before the generator's length limit.

The state of each hypothesis (depth, pre-terminals so far, innermost open label) is recomputed from
its prefix with a few tensor operations per step, so beam reordering needs no bookkeeping. Words are
counted from the source pieces: every sentencepiece piece that starts a word begins with U+2581.
"""
import logging
import math
from typing import Optional

import torch
from fairseq.search import BeamSearch
from fairseq.sequence_generator import SequenceGenerator
from torch import Tensor

from ..parsing.prepare import WORD_START

logger = logging.getLogger(__name__)


def word_start_mask(src_dict) -> Tensor:
    """[len(src_dict)] bool: True for the source pieces that start a word."""
    return torch.tensor([i >= src_dict.nspecial and sym.startswith(WORD_START)
                         for i, sym in enumerate(src_dict.symbols)], dtype=torch.bool)


def count_words(src_tokens: Tensor, word_start: Tensor) -> Tensor:
    """[B, S] source tokens -> [B] number of words (pads and EOS are never word starts)."""
    return word_start.to(src_tokens.device)[src_tokens].long().sum(1)


class TargetSymbols:
    """The classes of the target dictionary's symbols: opening and closing brackets, pre-terminals."""

    def __init__(self, tgt_dict):
        size = len(tgt_dict)
        self.is_open = torch.zeros(size, dtype=torch.bool)
        self.is_close = torch.zeros(size, dtype=torch.bool)
        self.is_pre = torch.zeros(size, dtype=torch.bool)
        self.close_of = torch.full((size,), -1, dtype=torch.long)  # open id -> id of its closing bracket
        for index, symbol in enumerate(tgt_dict.symbols):
            if index < tgt_dict.nspecial or symbol.startswith("madeupword"):
                continue  # <s> <pad> </s> <unk> and fairseq's padding symbols are never part of a tree
            if symbol[0] == ")" and len(symbol) > 1:
                self.is_close[index] = True
            elif symbol[0] == "(" and len(symbol) > 1:
                closing = ")" + symbol[1:]
                if closing in tgt_dict.indices:  # a label that could never be closed is never opened
                    self.is_open[index] = True
                    self.close_of[index] = tgt_dict.indices[closing]
            elif "(" not in symbol and ")" not in symbol:
                self.is_pre[index] = True
        if not self.is_open.any() or not self.is_pre.any():
            raise ValueError("the target dictionary has no opening brackets or no pre-terminals: "
                             "is it a constituency parsing dictionary?")

    def to(self, device) -> "TargetSymbols":
        for name in ("is_open", "is_close", "is_pre", "close_of"):
            setattr(self, name, getattr(self, name).to(device))
        return self


def allowed_next_tokens(symbols: TargetSymbols, prefix: Tensor, words: Tensor, max_len: int, eos: int) -> Tensor:
    """[N, V] bool: the tokens that keep each prefix on the way to a well-formed tree.

    prefix: [N, t] tokens generated so far (without the leading BOS/EOS); words: [N] source word
    counts; max_len: the most tokens before EOS."""
    rows, t = prefix.shape
    device = prefix.device
    zero = torch.zeros(rows, dtype=torch.long, device=device)
    if t == 0:
        depth, preterminals, inner_close = zero, zero, zero - 1
        last_was_open = torch.zeros(rows, dtype=torch.bool, device=device)
    else:
        opens, closes = symbols.is_open[prefix], symbols.is_close[prefix]
        running = (opens.long() - closes.long()).cumsum(1)  # depth after each token
        depth = running[:, -1]
        preterminals = symbols.is_pre[prefix].long().sum(1)
        # the innermost open phrase: the last opening bracket after which the depth equals the current one
        innermost = opens & running.eq(depth.unsqueeze(1))
        where = (innermost.long() * torch.arange(1, t + 1, device=device)).max(1).values  # 1-based, 0 = none
        inner_open = prefix.gather(1, (where - 1).clamp(min=0).unsqueeze(1)).squeeze(1)
        inner_close = torch.where(where > 0, symbols.close_of[inner_open], zero - 1)
        last_was_open = opens[:, -1]
    started = t > 0
    left = words - preterminals  # pre-terminals still to write
    used = t + 1  # tokens once this step's token is written
    complete = (depth == 0) if started else torch.zeros(rows, dtype=torch.bool, device=device)
    can_open = ~complete & (left > 0) & (used + left + depth + 1 <= max_len)
    if started:
        inside = depth > 0
        can_pre = inside & (left > 0) & (used + left - 1 + depth <= max_len)
        can_close = inside & ~last_was_open & ((depth > 1) | (left == 0)) & (inner_close >= 0) \
            & (used + left + depth - 1 <= max_len)
        can_eos = complete
    else:
        can_pre = can_close = torch.zeros(rows, dtype=torch.bool, device=device)
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


class ParseConstrainedBeamSearch(BeamSearch):
    """Beam search over well-formed linearized trees only."""

    def __init__(self, tgt_dict, symbols: Optional[TargetSymbols] = None):
        super().__init__(tgt_dict)
        self.symbols = symbols if symbols is not None else TargetSymbols(tgt_dict)
        # a hypothesis whose every continuation is masked keeps -inf; let the generator stop at max_len
        self.stop_on_max_len = True
        self._word_table: Optional[Tensor] = None
        self._max_len = 0

    def begin_batch(self, batch_ids: Tensor, word_counts: Tensor, max_len: int) -> None:
        """Called by ParseSequenceGenerator before each batch: the ids the generator will pass as
        `original_batch_idxs`, each sentence's word count and the length limit."""
        table = torch.zeros(int(batch_ids.max()) + 1, dtype=torch.long, device=word_counts.device)
        table[batch_ids] = word_counts
        self._word_table = table
        self._max_len = max_len

    def step(self, step: int, lprobs: Tensor, scores: Optional[Tensor], prev_output_tokens: Optional[Tensor] = None,
             original_batch_idxs: Optional[Tensor] = None, candidate_multiple: int = 2):
        if self._word_table is None or prev_output_tokens is None or original_batch_idxs is None:
            raise RuntimeError("ParseConstrainedBeamSearch needs ParseSequenceGenerator (the task's build_generator)")
        bsz, beam_size, vocab = lprobs.size()
        if self.symbols.is_open.device != lprobs.device:
            self.symbols.to(lprobs.device)
        words = self._word_table[original_batch_idxs].repeat_interleave(beam_size)
        allowed = allowed_next_tokens(self.symbols, prev_output_tokens[:, 1:], words, self._max_len, self.eos)
        lprobs = lprobs.masked_fill(~allowed.view(bsz, beam_size, vocab), -math.inf)
        return super().step(step, lprobs, scores, prev_output_tokens, original_batch_idxs, candidate_multiple)


class ParseSequenceGenerator(SequenceGenerator):
    """fairseq's SequenceGenerator that tells the constrained search each sentence's word count.

    If `--max-len-a/--max-len-b` leave less room than the shortest tree of the longest sentence
    (words + 2 tokens), the limit is raised for that batch so that a well-formed tree always fits."""

    def __init__(self, models, tgt_dict, word_start: Tensor, **kwargs):
        super().__init__(models, tgt_dict, **kwargs)
        if not isinstance(self.search, ParseConstrainedBeamSearch):
            raise TypeError("ParseSequenceGenerator needs a ParseConstrainedBeamSearch")
        self.word_start = word_start

    def _generate(self, sample, prefix_tokens: Optional[Tensor] = None, constraints: Optional[Tensor] = None,
                  bos_token: Optional[int] = None):
        src_tokens = sample["net_input"]["src_tokens"]
        bsz, src_len = src_tokens.size()[:2]
        words = count_words(src_tokens, self.word_start)
        ids = sample.get("id")
        if not isinstance(ids, Tensor):
            ids = torch.arange(bsz, device=src_tokens.device)
        need = int(words.max()) + 2  # (ROOT, one pre-terminal per word, )ROOT
        if need > self.max_len - 1:
            raise ValueError(f"a sentence of {need - 2} words needs at least {need} target positions; "
                             f"the model allows {self.max_len - 1} (--max-target-positions)")
        saved = self.max_len_b
        max_len = min(int(self.max_len_a * src_len + self.max_len_b), self.max_len - 1)
        if max_len < need:
            logger.warning("--max-len-a/--max-len-b allow %d target tokens but a %d-word sentence needs %d; "
                           "raising the limit for this batch", max_len, need - 2, need)
            self.max_len_b = saved + (need - max_len)
            max_len = min(int(self.max_len_a * src_len + self.max_len_b), self.max_len - 1)
        self.search.begin_batch(ids, words, max_len)
        try:
            return super()._generate(sample, prefix_tokens, constraints, bos_token)
        finally:
            self.max_len_b = saved
