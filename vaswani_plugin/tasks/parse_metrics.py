"""`--task constituency_parsing`, metrics: EVALB F1 of the validation set while training (`--eval-f1`).

Each validation batch is decoded with the generator of `--eval-f1-args`; its bracket counts go into
the `logging_output` (:class:`F1Counts`), and fairseq's metrics sum them into `f1` (EVALB's summary
F-measure over the whole set, usable as `--best-checkpoint-metric f1`) and `malformed` (the percentage
of outputs that needed a repair).
"""
import collections
import logging
from typing import Optional

import torch
from fairseq.logging import metrics

from ..parsing.evalb import COLLINS, STATUS_OK, score_sentence
from ..parsing.linearize import Repairs
from ..parsing.trees import Tree
from .parse_generation import hypothesis_tree, target_symbols

logger = logging.getLogger(__name__)

F1_KEYS = ("_f1_sentences", "_f1_malformed", "_f1_failed", "_f1_matched", "_f1_gold", "_f1_test")


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


class ParseMetricsMixin:
    """The task's `--eval-f1` methods (the task sets `sequence_generator` in build_model)."""

    def valid_step(self, sample, model, criterion):
        loss, sample_size, logging_output = super().valid_step(sample, model, criterion)
        if self.cfg.eval_f1 and sample.get("parse_split") is not None:
            with torch.no_grad():
                hypos = self.sequence_generator.generate([model], sample)
            counts = F1Counts()
            src = sample["net_input"]["src_tokens"]
            for row, row_hypos in enumerate(hypos):
                words, tags, gold, _ = self._words_and_tags(sample, row, src[row])
                symbols = target_symbols(self.tgt_dict, row_hypos[0]["tokens"]) if row_hypos else []
                tree, repairs = hypothesis_tree(symbols, words, tags, self.scheme)
                counts.add(gold, tree, repairs)
                if self.cfg.eval_f1_print_samples and row == 0:
                    logger.info("example tree: %s", tree)
                    logger.info("gold tree:    %s", gold)
            for key in F1_KEYS:
                logging_output[key] = counts[key]
        return loss, sample_size, logging_output

    def reduce_metrics(self, logging_outputs, criterion):
        super().reduce_metrics(logging_outputs, criterion)
        if not self.cfg.eval_f1:
            return
        totals = {key: sum(int(log.get(key, 0)) for log in logging_outputs) for key in F1_KEYS}
        if totals["_f1_sentences"] == 0:
            return
        for key, value in totals.items():
            metrics.log_scalar(key, value)
        metrics.log_derived("f1", lambda meters: round(F1Counts.f1(
            meters["_f1_matched"].sum, meters["_f1_gold"].sum, meters["_f1_test"].sum), 2))
        metrics.log_derived("malformed", lambda meters: round(
            100.0 * meters["_f1_malformed"].sum / meters["_f1_sentences"].sum, 2))
