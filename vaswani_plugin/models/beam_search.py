"""A lean beam search for one vaswani_transformer (speed only; the same search as fairseq's).

fairseq's `SequenceGenerator` is general: ensembles, language-model fusion, prefixes, constraints,
alignments, sampling, n-gram blocking. For one of our models and a plain beam search it does much
work per step that changes nothing (issue 15's torch.profiler run, Multi30k 3+3 d=256, beam 4,
batch 64, one thread: the model's GEMMs 41% of the time; 15% Python in and around the decoder call,
5% index_select, 4.5% topk (two per step), 4% a NaN guard comparing every log-probability with
itself, ...). `VaswaniBeamSearch` runs fairseq's search, hypothesis for hypothesis, with less:

- one hypothesis per sentence at the first step (fairseq decodes beam identical copies and reads
  one), expanded to the beam when the first candidates are chosen;
- the decoder runs as `modules.decoding_step.BeamDecodingStep`: the layers' maths for one token per
  hypothesis in fewer, larger operations, where no K or V moves when hypotheses are reordered (the
  encoder-decoder K/V are one per sentence, the self-attention's stay where they were computed,
  each query masked to its own ancestors': a step moves [rows, steps x beam] booleans, not every
  layer's [rows, H, steps, d_k] K and V); they shrink only when sentences finish; only the filled
  columns of the token and score buffers move, into preallocated spares;
- the 2 x beam candidates come from one pass of a C kernel that keeps the best so far and skips
  what cannot enter (`modules.decoding_kernels`; float32 on CPU), else from the best 128-token
  blocks (`top_candidates`), without adding the scores to all of [rows, V] and sorting it;
- finished hypotheses are collected by tensor ops, without a Python loop per hypothesis, and
  finished sentences leave the batch, as in fairseq; on CPU this bookkeeping after the candidates
  (`_advance`: about 25 torch operations, 120-145 us a step at batch 1) is one C pass where the
  kernels are built (`modules.decoding_kernels.BeamAdvance`, 17 us);
- no NaN guard over the log-probabilities (a model that gives NaN is broken either way), and no
  second top-k when no candidate ends a hypothesis.

The search is fairseq's `BeamSearch` + `SequenceGenerator._generate` as written in fairseq 0.12:
2 x beam candidates by top-k over (cumulative score + log-probability); those among the first beam
that end in EOS are finished (until a sentence has beam of them, then it is done); the first beam
candidates that do not end in EOS live on; the score of a finished hypothesis is its sum of
log-probabilities divided by length ** lenpen (`--lenpen`, unless `--unnormalized`); at the length
limit only EOS is allowed, before `--min-len` EOS is not. The hypotheses, their order and their
dictionaries (tokens, score, positional_scores, attention, alignment) are those fairseq returns; the
first step computes one row per sentence instead of beam, so float rounding can differ there by a
few ulps, which changes a hypothesis only where two candidates tie to that precision.

`fairseq_fixes/lean_beam_search.py` chooses this search or fairseq's; a call with prefix tokens,
constraints or another BOS token (which it does not do) is handed to fairseq's generator.
"""
import math
from typing import Dict, List, Optional, Tuple

import torch
from torch import Tensor

from ..errors import ConfigError
from ..modules import decoding_kernels
from ..modules.attention_cache import BeamAncestry
from ..modules.decoding_step import BeamDecodingStep, encode


_BLOCK = 128  # tokens per block in `top_candidates`
# Up to this many log-probabilities, one top-k over all of them is quicker than the blocks' dozen small
# ops (AMD EPYC Zen 1, one thread, us: 4 x 7,800 122 against 296, 8 x 7,800 193 / 324, 16 x 7,800
# 361 / 370, 4 x 32,000 491 / 295, 64 x 7,800 1,696 / 811).
_ONE_PASS = 2 ** 16


def top_candidates(lprobs: Tensor, offsets: Optional[Tensor], group: int, c: int) -> Tuple[Tensor, Tensor]:
    """fairseq's candidates, `torch.topk((lprobs + offsets).view(live, group * V), c)`: per sentence,
    the c best (row, token) of its group rows by log-probability + the row's cumulative score
    (offsets [rows, 1]; None: 0), best first, with indices into group * V. Exact up to the order of
    equal scores, without adding to or sorting all of [rows, V]: first the maximum of every block of
    128 tokens, then the tokens of the c best blocks only. The c best candidates lie in those blocks:
    a block left out has c blocks at least as good above it, each holding a candidate as good as
    anything in it. The candidates' scores are the same float sums as fairseq's. Float32 on CPU takes
    decoding_kernels' one pass instead (4 x 7,800 sums: 8 us against 64 us, 256 x 7,800: 0.42 ms
    against 0.77 ms; Zen 4, one thread)."""
    if decoding_kernels.takes(lprobs):
        return decoding_kernels.top_candidates(lprobs, offsets, group, c)
    rows, vocab = lprobs.shape
    live, full = rows // group, vocab // _BLOCK
    if full < c or rows * vocab <= _ONE_PASS:  # a small vocabulary or a few rows: one pass
        flat = lprobs if offsets is None else lprobs + offsets
        return torch.topk(flat.view(live, group * vocab), c)
    heads = lprobs[:, :full * _BLOCK].view(rows, full, _BLOCK).amax(-1)  # [rows, blocks]
    if full * _BLOCK < vocab:
        heads = torch.cat([heads, lprobs[:, full * _BLOCK:].amax(-1, keepdim=True)], dim=1)
    blocks = heads.size(1)
    if offsets is not None:
        heads = heads + offsets
    best = heads.view(live, group * blocks).topk(c, sorted=False).indices  # [live, c] a sentence's blocks
    row = torch.div(best, blocks, rounding_mode="trunc")  # [live, c] row within the sentence
    cols = (best % blocks).unsqueeze(-1) * _BLOCK + torch.arange(_BLOCK, device=best.device)  # [live, c, 128]
    within = (row.unsqueeze(-1) * vocab + cols.clamp(max=vocab - 1)).view(live, -1)  # [live, c * 128]
    values = lprobs.view(live, group * vocab).gather(1, within)
    if offsets is not None:
        values = values + offsets.view(live, group).gather(1, row).repeat_interleave(_BLOCK, dim=1)
    values.masked_fill_((cols >= vocab).view(live, -1), float("-inf"))  # the last block's columns past V
    cand_scores, pick = values.topk(c)
    return cand_scores, within.gather(1, pick)


class VaswaniBeamSearch:
    """Called as fairseq's `SequenceGenerator` is (the task's `build_generator` passes it as
    `seq_gen_cls`): the same arguments; the ones this search does not take are kept, at their
    defaults, for the fairseq generator a call it does not handle is given to."""

    def __init__(self, models, tgt_dict, beam_size: int = 1, max_len_a: float = 0, max_len_b: int = 200,
                 max_len: int = 0, min_len: int = 1, normalize_scores: bool = True, len_penalty: float = 1.0,
                 unk_penalty: float = 0.0, **fairseq_only):
        if len(models) != 1:
            raise ValueError(f"VaswaniBeamSearch decodes one model, got {len(models)}")
        self.model = models[0]
        self.model.eval()
        self.tgt_dict = tgt_dict
        self.pad, self.unk, self.eos = tgt_dict.pad(), tgt_dict.unk(), tgt_dict.eos()
        self.symbols_to_strip_from_output = {self.eos}
        self.vocab_size = len(tgt_dict)
        self.beam_size = min(beam_size, self.vocab_size - 1)  # pad is never chosen (fairseq's rule)
        self.max_len_a, self.max_len_b, self.min_len = max_len_a, max_len_b, min_len
        self.max_len = max_len or self.model.max_decoder_positions()
        self.normalize_scores, self.len_penalty, self.unk_penalty = normalize_scores, len_penalty, unk_penalty
        self._fairseq_args = dict(beam_size=beam_size, max_len_a=max_len_a, max_len_b=max_len_b, max_len=max_len,
                                  min_len=min_len, normalize_scores=normalize_scores, len_penalty=len_penalty,
                                  unk_penalty=unk_penalty, **fairseq_only)
        self._fairseq = None

    def fairseq_generator(self):
        """fairseq's SequenceGenerator with the same arguments (built on first use)."""
        if self._fairseq is None:
            from fairseq.sequence_generator import SequenceGenerator

            self._fairseq = SequenceGenerator([self.model], self.tgt_dict, **self._fairseq_args)
        return self._fairseq

    @torch.no_grad()
    def generate(self, models, sample: Dict[str, Dict[str, Tensor]], prefix_tokens: Optional[Tensor] = None,
                 constraints: Optional[Tensor] = None, bos_token: Optional[int] = None, **kwargs
                 ) -> List[List[Dict[str, Tensor]]]:
        """fairseq's `generate`: per sentence, its beam finished hypotheses, best first. Like fairseq's,
        it decodes the model it was built with (`models` is the caller's list, unused)."""
        if prefix_tokens is not None or constraints is not None or bos_token is not None or kwargs:
            return self.fairseq_generator().generate(models, sample, prefix_tokens=prefix_tokens,
                                                     constraints=constraints, bos_token=bos_token, **kwargs)
        return self._search(sample["net_input"])

    def _length_limit(self, src_tokens: Tensor) -> int:
        max_len = min(int(self.max_len_a * src_tokens.size(1) + self.max_len_b), self.max_len - 1)
        if self.min_len > max_len:
            raise ConfigError(f"--min-len ({self.min_len}) is larger than the length limit of this batch ({max_len}: "
                              f"--max-len-a {self.max_len_a} x source length {src_tokens.size(1)} + --max-len-b "
                              f"{self.max_len_b}, at most the model's {self.max_len - 1})")
        return max_len

    def _search(self, net_input: Dict[str, Tensor]) -> List[List[Dict[str, Tensor]]]:
        src_tokens = net_input["src_tokens"]
        bsz, k, vocab = src_tokens.size(0), self.beam_size, self.vocab_size
        max_len = self._length_limit(src_tokens)
        encoder_out = encode(self.model.encoder, src_tokens) or self.model.encoder.forward_torchscript(net_input)
        ancestry = BeamAncestry(bsz, k, device=src_tokens.device)
        decode = BeamDecodingStep(self.model.decoder, encoder_out["memory"], encoder_out.get("memory_padding_mask"),
                                  ancestry)
        # Row r holds hypothesis r % group of live sentence r // group (group: 1 at the first step, then k).
        tokens = src_tokens.new_full((bsz * k, max_len + 2), self.pad)  # BOS, up to max_len tokens, EOS
        tokens[:, 0] = self.eos
        scores = torch.zeros(bsz * k, max_len + 1, device=src_tokens.device)  # cumulative, per position
        spare_tokens, spare_scores = torch.empty_like(tokens), torch.empty_like(scores)
        sentence = torch.arange(bsz, device=src_tokens.device)  # live row -> sentence of the batch
        found = torch.zeros(bsz, dtype=torch.long, device=src_tokens.device)  # finished hypotheses so far
        finished: List[tuple] = []  # per step: (sentences, tokens, positional scores, scores) of those finished
        # the log-probabilities are float32 (as fairseq's): C takes the bookkeeping on CPU where it is built
        advance = (decoding_kernels.BeamAdvance(bsz, k, vocab, self.eos) if decoding_kernels.takes(scores)
                   else self._advance)
        group = 1
        for step in range(max_len + 1):  # one step more than max_len tokens: the EOS
            live = sentence.numel()
            rows = live * group
            logits = decode(tokens[:rows, step], step).float()  # [rows, V]; the log-probabilities float32 as fairseq's
            lprobs = torch.log_softmax(logits, dim=-1, out=logits)  # in place: no second [rows, V] buffer
            lprobs[:, self.pad] = -math.inf
            if self.unk_penalty:
                lprobs[:, self.unk] -= self.unk_penalty
            if step >= max_len:  # only EOS from here on
                lprobs[:, :self.eos] = -math.inf
                lprobs[:, self.eos + 1:] = -math.inf
            elif step < self.min_len:
                lprobs[:, self.eos] = -math.inf
            offsets = scores[:rows, step - 1:step] if step > 0 else None  # [rows, 1] the cumulative scores
            cand_scores, cand = top_candidates(lprobs, offsets, group, min(2 * k, group * vocab - 1))  # [live, C]
            found, keep, parents, ended = advance(step, step == max_len, cand_scores, cand, group, found, tokens,
                                                  scores, spare_tokens, spare_scores)
            if ended is not None:
                who, rows_ended, final = ended
                finished.append(self._finished(step, sentence[who], rows_ended, final, tokens, scores))
            if parents is None:
                break
            tokens, spare_tokens, scores, spare_scores = spare_tokens, tokens, spare_scores, scores
            ancestry.follow(parents, group=k)
            if keep is not None:
                sentence = sentence[keep]
                decode.keep_sentences(keep)
            group = k
        return self._collect(bsz, finished)

    def _advance(self, step: int, last: bool, cand_scores: Tensor, cand: Tensor, group: int, found: Tensor,
                 tokens: Tensor, scores: Tensor, spare_tokens: Tensor, spare_scores: Tensor
                 ) -> Tuple[Tensor, Optional[Tensor], Optional[Tensor], Optional[Tuple[Tensor, Tensor, Tensor]]]:
        """After a step's candidates (cand_scores, cand [live, C]: indices into each sentence's group x V):
        those among the first k that end in EOS are finished (until a sentence has k of them: then it is
        done); the first k that do not end go on, their rows' tokens and scores written into the spare
        buffers -> (found per sentence that goes on, the live sentences that go on (None: all), each new
        row's parent row (None: the search is over), the hypotheses ended here as (live sentence, row,
        cumulative score) (None: none)). `decoding_kernels.BeamAdvance` is the same in C."""
        live, k, vocab, eos = cand.size(0), self.beam_size, self.vocab_size, self.eos
        cand_tokens = cand.fmod(vocab)
        cand_rows = torch.div(cand, vocab, rounding_mode="trunc") + (
            torch.arange(live, device=cand.device).unsqueeze(1) * group)  # the row each extends
        ends = cand_tokens.eq(eos) & cand_scores.ne(-math.inf)  # [live, C]
        keep = ended = None  # live sentences that go on (None: all); hypotheses ended here
        if last or bool(ends.any()):
            first = ends[:, :k]
            rank = first.cumsum(1) - first.long()  # earlier EOS candidates of the same sentence
            accepted = first & (found.unsqueeze(1) + rank < k)  # a sentence takes k finished at most
            who, which = accepted.nonzero(as_tuple=True)
            if who.numel():
                ended = (who, cand_rows[who, which], cand_scores[who, which])
            found = found + accepted.sum(1)
            done = found.eq(k)
            if last or bool(done.all()):
                return found, None, None, ended
            if bool(done.any()):
                keep = (~done).nonzero().squeeze(1)
                cand_scores, cand_tokens, cand_rows, ends = (t[keep] for t in (cand_scores, cand_tokens,
                                                                             cand_rows, ends))
                found = found[keep]
            # the first k candidates that do not end: an EOS sorts after every other candidate
            order = torch.arange(ends.size(1), device=ends.device)
            alive = torch.topk(ends.long() * ends.size(1) + order, k=k, dim=1, largest=False)[1]
            cand_scores, cand_tokens, cand_rows = (t.gather(1, alive) for t in (cand_scores, cand_tokens, cand_rows))
        else:
            cand_scores, cand_tokens, cand_rows = cand_scores[:, :k], cand_tokens[:, :k], cand_rows[:, :k]
        parents = cand_rows.reshape(-1)  # [live' * k] the old row of each new row
        new_rows = parents.numel()
        torch.index_select(tokens[:, :step + 1], 0, parents, out=spare_tokens[:new_rows, :step + 1])
        spare_tokens[:new_rows, step + 1] = cand_tokens.reshape(-1)
        if step > 0:
            torch.index_select(scores[:, :step], 0, parents, out=spare_scores[:new_rows, :step])
        spare_scores[:new_rows, step] = cand_scores.reshape(-1)
        return found, keep, parents, ended

    def _finished(self, step: int, sentences: Tensor, rows: Tensor, final: Tensor, tokens: Tensor,
                  scores: Tensor) -> tuple:
        """Hypotheses ending at `step` (rows extended by EOS, `final` their cumulative scores) ->
        (sentences, tokens [n, step + 1] with the EOS, positional scores [n, step + 1], scores [n])."""
        hyp_tokens = tokens.index_select(0, rows)[:, 1:step + 2]
        hyp_tokens[:, step] = self.eos
        positional = scores.index_select(0, rows)[:, :step + 1]
        positional[:, step] = final
        positional[:, 1:] = positional[:, 1:] - positional[:, :-1]  # cumulative -> per token
        if self.normalize_scores:
            final = final / (step + 1) ** self.len_penalty
        return sentences, hyp_tokens, positional, final

    def _collect(self, bsz: int, finished: List[tuple]) -> List[List[Dict[str, Tensor]]]:
        """fairseq's output: per sentence its hypotheses as dicts, best score first."""
        out: List[List[Dict[str, Tensor]]] = [[] for _ in range(bsz)]
        empty = torch.empty(0)
        for sentences, hyp_tokens, positional, final in finished:
            for i, sent in enumerate(sentences.tolist()):
                out[sent].append({"tokens": hyp_tokens[i], "score": final[i], "attention": empty,
                                  "alignment": empty, "positional_scores": positional[i]})
        for hyps in out:
            hyps.sort(key=lambda h: -float(h["score"]))
        return out
