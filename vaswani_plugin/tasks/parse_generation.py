"""`--task constituency_parsing`, generation and tree output: the (constrained) generator, hypotheses to
trees, and the trees of a decoded split written with their EVALB summary.

fairseq-generate decodes a split batch by batch; :class:`SplitCollector` gathers its trees (in any
order) and, as the explicit last step, :meth:`SplitCollector.finish` writes them in input order to
`--trees-output` with the EVALB (COLLINS) report and prints the `Parse SPLIT:` lines. It runs when the
last sentence the split's batches hold is decoded (`ParseDataMixin.batched_ids`: sentences left out
of the batches get a flat tree and a warning), or when :meth:`ParseGenerationMixin.finish_split` is
called (e.g. by a script that stops early).
"""
import logging
import sys
from typing import Dict, List, Optional, Sequence, Set, Tuple

from fairseq import utils

from ..errors import ConfigError
from ..parsing.evalb import COLLINS, evalb_score, format_report
from ..parsing.linearize import Repairs, delinearize
from ..parsing.trees import TOP_LABEL, Tree
from .parse_search import ParseConstrainedBeamSearch, ParseSequenceGenerator

logger = logging.getLogger(__name__)


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


def flat_tree(words: Sequence[str], tags: Sequence[str]) -> Tree:
    """(TOP (T w1) (T w2) ...): what stands for a sentence fairseq did not decode at all."""
    return Tree(TOP_LABEL, [Tree(tag, [word]) for tag, word in zip(tags, words)])


class SplitCollector:
    """Trees of one split as fairseq-generate decodes them (in any order); `finish` writes them."""

    def __init__(self, split: str, gold: Sequence[Tree], trees_output: Optional[str],
                 expected: Optional[Set[int]] = None, out=None):
        self.split = split
        self.gold = gold
        self.trees_output = trees_output
        self.expected = set(range(len(gold))) if expected is None else set(expected)
        self.out = out or sys.stdout
        self.trees: Dict[int, Tree] = {}
        self.repairs: Dict[int, Repairs] = {}
        self.done = False

    def add(self, sent_id: int, tree: Tree, repairs: Repairs) -> None:
        if self.done:
            return
        self.trees[sent_id] = tree
        self.repairs[sent_id] = repairs
        if self.expected <= self.trees.keys():
            self.finish()

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
            lines.append(f"{prefix} WARNING: {len(missing)} sentences were not decoded (left out of the batches, "
                         "e.g. by --skip-invalid-size-inputs-valid-test or --num-shards); each got a flat tree, "
                         "scored as is")
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


class ParseGenerationMixin:
    """The task's generation methods (the task sets `tgt_dict`, `scheme`, `word_start`, `cfg`)."""

    _collectors: Dict[str, SplitCollector]
    _nbest: int

    def build_generator(self, models, args, seq_gen_cls=None, extra_gen_cls_kwargs=None,
                        prefix_allowed_tokens_fn=None):
        self._nbest = getattr(args, "nbest", 1) or 1
        if not self.cfg.constrained_decoding or getattr(args, "score_reference", False):
            return super().build_generator(models, args, seq_gen_cls, extra_gen_cls_kwargs, prefix_allowed_tokens_fn)
        if (getattr(args, "min_len", 1) or 1) > 1:
            # fairseq masks EOS before the search step while step < --min-len, so the search could not end a
            # hypothesis whose tree is complete; the tree's length is already fixed by the words.
            raise ConfigError("--constrained-decoding cannot be combined with --min-len: the constrained search "
                              "ends each tree itself (one pre-terminal per source word)")
        for flag, used in (("--sampling", getattr(args, "sampling", False)),
                           ("--diverse-beam-groups", getattr(args, "diverse_beam_groups", -1) > 0),
                           ("--diversity-rate", getattr(args, "diversity_rate", -1) > -1),
                           ("--match-source-len", getattr(args, "match_source_len", False)),
                           ("--constraints", getattr(args, "constraints", False)),
                           ("--print-alignment", getattr(args, "print_alignment", False)),
                           ("--prefix-size", getattr(args, "prefix_size", 0) > 0),
                           ("a prefix_allowed_tokens_fn", prefix_allowed_tokens_fn is not None)):
            if used:
                raise ConfigError(f"--constrained-decoding is a beam search of its own; it cannot be combined "
                                  f"with {flag}")
        search = ParseConstrainedBeamSearch(self.tgt_dict, self.target_symbols)

        def make(models_, tgt_dict, search_strategy=None, **kwargs):
            return ParseSequenceGenerator(models_, tgt_dict, word_start=self.word_start, search_strategy=search,
                                          **kwargs)

        return super().build_generator(models, args, seq_gen_cls=make, extra_gen_cls_kwargs=extra_gen_cls_kwargs)

    def _words_and_tags(self, sample, row: int, src_tokens):
        """(words in sentence order, gold tags or None, gold tree or None, interactive line or None)."""
        split = sample.get("parse_split")
        if split is not None and "id" in sample:
            gold = self.gold_trees(split)[int(sample["id"][row])]
            return gold.words(), gold.tags(), gold, None
        words, line = self.interactive_words(src_tokens)
        return words, None, None, line

    def inference_step(self, generator, models, sample, prefix_tokens=None, constraints=None):
        hypos = super().inference_step(generator, models, sample, prefix_tokens=prefix_tokens, constraints=constraints)
        src = sample["net_input"]["src_tokens"]
        for row, row_hypos in enumerate(hypos):
            src_tokens = utils.strip_pad(src[row], self.src_dict.pad()).cpu()
            words, tags, gold, line = self._words_and_tags(sample, row, src_tokens)
            if gold is not None:  # fairseq-generate on a prepared split
                split = sample["parse_split"]
                collector = self._collectors.get(split)
                if collector is None:
                    collector = self._collectors[split] = SplitCollector(
                        split, self.gold_trees(split), self.cfg.trees_output, self.batched_ids.get(split))
                symbols = target_symbols(self.tgt_dict, row_hypos[0]["tokens"]) if row_hypos else []
                tree, repairs = hypothesis_tree(symbols, words, tags, self.scheme)
                collector.add(int(sample["id"][row]), tree, repairs)
            elif line is not None:  # fairseq-interactive
                self.interactive_outputs(generator, line, words, row_hypos[: self._nbest])
        return hypos

    def finish_split(self, split: str) -> None:
        """Write the trees of `split` decoded so far (the rest get flat trees) and print the summary."""
        collector = self._collectors.get(split)
        if collector is not None and not collector.done:
            collector.finish()
