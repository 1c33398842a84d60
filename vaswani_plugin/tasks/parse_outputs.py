"""From decoder outputs to trees and scores, for `--task constituency_parsing`.

- :func:`hypothesis_tree`: target tokens + the sentence's words -> (tree, repairs);
- :class:`F1Counts`: bracket counts of a batch, summed by fairseq's metrics into `f1` (`--eval-f1`);
- :class:`SplitCollector`: the trees of a whole split decoded by fairseq-generate, written to
  `--trees-output` in input order with an EVALB (COLLINS) summary once every sentence is in;
- :class:`InteractiveCodec`: fairseq-interactive's `bpe`: encodes a typed sentence into source pieces
  and turns the printed hypothesis (the `D-` line) into the bracketed tree.
"""
from __future__ import annotations

import atexit
import collections
import logging
import sys
from typing import Dict, List, Optional, Sequence, Tuple

from ..parsing.evalb import COLLINS, STATUS_OK, evalb_score, format_report, score_sentence
from ..parsing.linearize import PLACEHOLDER_TAG, Repairs, delinearize
from ..parsing.trees import TOP_LABEL, Tree
from ..parsing.prepare import WORD_START, encode_source

logger = logging.getLogger(__name__)

F1_KEYS = ("_f1_sentences", "_f1_malformed", "_f1_failed", "_f1_matched", "_f1_gold", "_f1_test")


def target_symbols(tgt_dict, tokens) -> List[str]:
    """Hypothesis token ids -> target symbols, without EOS/BOS/padding."""
    skip = {tgt_dict.eos(), tgt_dict.bos(), tgt_dict.pad()}
    return [tgt_dict[i] for i in tokens.tolist() if i not in skip]


def hypothesis_tree(symbols: Sequence[str], words: Sequence[str], tags: Optional[Sequence[str]] = None,
                    scheme="vinyals") -> Tuple[Optional[Tree], Repairs]:
    """The tree of a predicted sequence (repaired where needed); None for a sentence without words."""
    if not words:
        return None, Repairs()
    return delinearize(list(symbols), words, tags, scheme)


def flat_tree(words: Sequence[str], tags: Optional[Sequence[str]] = None) -> Tree:
    """(TOP (T w1) (T w2) ...): what stands for a sentence fairseq did not decode at all."""
    tags = tags or [PLACEHOLDER_TAG] * len(words)
    return Tree(TOP_LABEL, [Tree(tag, [word]) for tag, word in zip(tags, words)])


def words_from_source(src_dict, tokens, reverse_source: bool) -> List[str]:
    """Best-effort words from source pieces (the prepared data keeps the real words; this is the fallback)."""
    pieces = [src_dict[i] for i in tokens.tolist() if i >= src_dict.nspecial or i == src_dict.unk()]
    words = "".join(pieces).replace(WORD_START, " ").split()
    return words[::-1] if reverse_source else words


class F1Counts(collections.Counter):
    """Summed EVALB counts of decoded sentences, as `logging_output` entries (keys in F1_KEYS)."""

    def add(self, gold: Tree, tree: Optional[Tree], repairs: Repairs) -> None:
        result = score_sentence(0, gold, tree, COLLINS)
        self["_f1_sentences"] += 1
        self["_f1_malformed"] += int(repairs.count > 0)
        if result.status != STATUS_OK:
            self["_f1_failed"] += 1
            return
        self["_f1_matched"] += result.matched
        self["_f1_gold"] += result.gold_brackets
        self["_f1_test"] += result.test_brackets

    @staticmethod
    def f1(matched: float, gold: float, test: float) -> float:
        """Bracketing F1 (percent) from summed counts, as EVALB's summary computes it."""
        return 200.0 * matched / (gold + test) if gold + test else 0.0


class SplitCollector:
    """Trees of one split as fairseq-generate decodes them (in any order), finished once all are in."""

    def __init__(self, split: str, gold: Sequence[Tree], trees_output: Optional[str], out=None):
        self.split = split
        self.gold = gold
        self.trees_output = trees_output
        self.out = out or sys.stdout
        self.trees: Dict[int, Tree] = {}
        self.repairs: Dict[int, Repairs] = {}
        self.done = False
        atexit.register(self._at_exit)

    def add(self, sent_id: int, tree: Tree, repairs: Repairs) -> None:
        if self.done:
            return
        self.trees[sent_id] = tree
        self.repairs[sent_id] = repairs
        if len(self.trees) == len(self.gold):
            self.finish()

    def _at_exit(self) -> None:
        if not self.done and self.trees:
            self.finish()  # some sentences were never decoded (e.g. --skip-invalid-size-inputs-valid-test)

    def finish(self) -> None:
        """Write the trees (input order, one per sentence) and print the summary."""
        self.done = True
        missing = [i for i in range(len(self.gold)) if i not in self.trees]
        trees = [self.trees[i] if i in self.trees else flat_tree(g.words(), g.tags()) for i, g in enumerate(self.gold)]
        report = evalb_score(self.gold, trees, COLLINS)
        prefix = f"Parse {self.split}:"
        lines = []
        if self.trees_output:
            with open(self.trees_output, "w", encoding="utf-8") as handle:
                handle.writelines(tree.to_string() + "\n" for tree in trees)
            with open(self.trees_output + ".evalb", "w", encoding="utf-8") as handle:
                handle.write(format_report(report))
            lines.append(f"{prefix} wrote {len(trees)} trees for {len(self.gold)} sentences to {self.trees_output} "
                         f"(EVALB report: {self.trees_output}.evalb)")
        else:
            lines.append(f"{prefix} {len(trees)} trees for {len(self.gold)} sentences (pass --trees-output FILE "
                         "to write them)")
        if missing:
            lines.append(f"{prefix} WARNING: {len(missing)} sentences were not decoded (filtered by size?); "
                         "each got a flat tree, scored as is")
        summary = report.all
        lines.append(f"{prefix} EVALB (COLLINS) F1 = {summary.f1:.2f} | recall {summary.recall:.2f} precision "
                     f"{summary.precision:.2f} complete match {summary.complete_match:.2f} | valid sentences "
                     f"{summary.valid_sentences}/{summary.sentences} | F1 with failures as empty "
                     f"{summary.f1_with_failures:.2f}")
        total = Repairs()
        malformed = 0
        for repairs in self.repairs.values():
            total.update(repairs)
            malformed += int(repairs.count > 0)
        decoded = len(self.repairs)
        rate = 100.0 * malformed / decoded if decoded else 0.0
        kinds = " ".join(f"{kind}={number}" for kind, number in sorted(total.items()) if number) or "none"
        lines.append(f"{prefix} malformed outputs {malformed}/{decoded} ({rate:.2f}%) | repairs: {kinds}")
        for line in lines:
            print(line, file=self.out, flush=True)


class InteractiveCodec:
    """fairseq-interactive's `bpe` for this task.

    encode: a typed sentence (words separated by spaces) -> source pieces (reversed with
    --reverse-source). decode: the hypothesis string fairseq-interactive prints as `D-` -> the tree
    the task built for it in `inference_step` (entries are consumed in input order, nbest per
    sentence, which is the order fairseq-interactive prints them in); anything else is returned as is."""

    def __init__(self, spm_model: str, reverse_source: bool):
        import sentencepiece as spm

        self.sp = spm.SentencePieceProcessor(model_file=spm_model)
        self.reverse_source = reverse_source
        self.pending: Dict[int, List[Tuple[str, str]]] = {}

    def encode(self, line: str) -> str:
        return encode_source(self.sp, line.split(), self.reverse_source)

    def add(self, line_index: int, outputs: List[Tuple[str, str]]) -> None:
        """(hypothesis string, tree string) pairs of one input line, best first."""
        if outputs:
            self.pending[line_index] = list(outputs)

    def decode(self, text: str) -> str:
        if self.pending:
            first = min(self.pending)
            entries = self.pending[first]
            if entries and entries[0][0] == text:
                _, tree = entries.pop(0)
                if not entries:
                    del self.pending[first]
                return tree
        return text
