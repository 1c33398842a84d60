"""`--constrained-decoding`: fairseq's beam search over well-formed linearized trees only.

:class:`ParseConstrainedBeamSearch` masks each step's log-probabilities with
:func:`.parse_constraints.allowed_next_tokens` and carries every hypothesis's :class:`ParseState`
through fairseq's own search hooks, the ones its lexically constrained search uses:

- `step` masks with the beams' states, lets `BeamSearch` choose the candidates, and advances the state
  of each candidate from its parent beam by its token (O(1) per candidate, whatever the length);
- `prune_sentences(batch_idxs)` drops the candidates of the sentences that just finished;
- `update_constraints(active_hypos)` keeps the states of the candidates the generator kept, in its order.

:class:`ParseSequenceGenerator` tells the search each sentence's word count and the length limit.
"""
import logging
import math
from typing import Optional

import torch
from fairseq.search import BeamSearch
from fairseq.sequence_generator import SequenceGenerator
from torch import Tensor

from .parse_constraints import ParseState, TargetSymbols, allowed_next_tokens, count_words

logger = logging.getLogger(__name__)


class ParseConstrainedBeamSearch(BeamSearch):
    """Beam search over well-formed linearized trees only, the grammar state carried with the beams."""

    def __init__(self, tgt_dict, symbols: Optional[TargetSymbols] = None):
        super().__init__(tgt_dict)
        self.symbols = symbols if symbols is not None else TargetSymbols(tgt_dict)
        # a hypothesis whose every continuation is masked keeps -inf; let the generator stop at max_len
        self.stop_on_max_len = True
        self._word_table: Optional[Tensor] = None
        self._max_len = 0
        self.state: Optional[ParseState] = None  # of the live hypotheses, [bsz * beam] rows
        self._candidates: Optional[ParseState] = None  # of this step's candidates, [bsz * cand_size] rows
        self._cand_size = 0

    def begin_batch(self, batch_ids: Tensor, word_counts: Tensor, max_len: int) -> None:
        """Called by ParseSequenceGenerator before each batch: the ids the generator will pass as
        `original_batch_idxs`, each sentence's word count and the length limit."""
        table = torch.zeros(int(batch_ids.max()) + 1, dtype=torch.long, device=word_counts.device)
        table[batch_ids] = word_counts
        self._word_table = table
        self._max_len = max_len
        self.state = self._candidates = None

    def step(self, step: int, lprobs: Tensor, scores: Optional[Tensor], prev_output_tokens: Optional[Tensor] = None,
             original_batch_idxs: Optional[Tensor] = None, candidate_multiple: int = 2):
        if self._word_table is None or original_batch_idxs is None:
            raise RuntimeError("ParseConstrainedBeamSearch needs ParseSequenceGenerator (the task's build_generator)")
        bsz, beam_size, vocab = lprobs.size()
        if self.symbols.is_open.device != lprobs.device:
            self.symbols.to(lprobs.device)
        if step == 0 or self.state is None:
            self.state = ParseState.initial(bsz * beam_size, lprobs.device)
        if self.state.rows != bsz * beam_size or self.state.length != step:
            raise RuntimeError(f"constrained search state out of step: {self.state.rows} rows at length "
                               f"{self.state.length}, the generator has {bsz}x{beam_size} at step {step}")
        words = self._word_table[original_batch_idxs].repeat_interleave(beam_size)
        allowed = allowed_next_tokens(self.symbols, self.state, words, self._max_len, self.eos)
        lprobs = lprobs.masked_fill(~allowed.view(bsz, beam_size, vocab), -math.inf)
        cand_scores, cand_indices, cand_beams = super().step(step, lprobs, scores, prev_output_tokens,
                                                             original_batch_idxs, candidate_multiple)
        self._cand_size = cand_indices.size(1)
        parents = cand_beams + torch.arange(bsz, device=cand_beams.device).unsqueeze(1) * beam_size
        self._candidates = self.state.advance(self.symbols, parents.view(-1), cand_indices.reshape(-1))
        return cand_scores, cand_indices, cand_beams

    def prune_sentences(self, batch_idxs: Tensor):
        rows = (batch_idxs.unsqueeze(1) * self._cand_size
                + torch.arange(self._cand_size, device=batch_idxs.device)).view(-1)
        self._candidates = self._candidates.select(rows)

    def update_constraints(self, active_hypos: Tensor):
        offsets = torch.arange(active_hypos.size(0), device=active_hypos.device).unsqueeze(1) * self._cand_size
        self.state = self._candidates.select((active_hypos + offsets).view(-1))


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
