"""`--task constituency_parsing`: English constituency parsing as sequence to sequence (§6.3).

DATA is a directory made by `python -m vaswani_plugin.parsing.prepare`: sentencepiece source pieces,
linearized trees as targets (separate dictionaries), the gold trees of every split and the
sentencepiece model. The task works with the real command-line tools:

    fairseq-train DATA --user-dir vaswani_plugin --task constituency_parsing --arch vaswani_transformer_parse \\
        --criterion label_smoothed_xent --lr-scheduler inverse_sqrt_warmup --optimizer adam ... \\
        [--eval-f1 --eval-f1-args '{"beam": 1}' --best-checkpoint-metric f1 --maximize-best-checkpoint-metric]
    fairseq-generate DATA --user-dir vaswani_plugin --task constituency_parsing --path CKPT --gen-subset test \\
        --beam 21 --lenpen 0.3 --max-len-a 1 --max-len-b 300 [--constrained-decoding] [--trees-output FILE]
    fairseq-interactive DATA --user-dir vaswani_plugin --task constituency_parsing --path CKPT

fairseq-generate prints its usual S/T/H/D lines (H: the linearized tree) and, once every sentence
of the split is decoded, `Parse SPLIT: ...` lines: the number of trees, the EVALB (COLLINS) F1 and
the malformed-output (repair) counts; `--trees-output FILE` writes the trees, one per sentence in
input order, and FILE.evalb the full EVALB report. Trees are scored, and written, with the gold POS
tags (the usual practice, and the only one possible with the "vinyals" XX scheme). fairseq-interactive
prints the tree as the `D-` line (predicted tags: XX in the "vinyals" scheme).

Outside training, batches are never required to be a multiple of `--required-batch-size-multiple`:
fairseq 0.12 drops a last batch that is not, and every sentence must get its tree.
"""
import collections
import json
import logging
import os
from argparse import Namespace
from dataclasses import dataclass, field
from typing import Dict, List, Optional

import torch
from fairseq import utils
from fairseq.data import LanguagePairDataset, data_utils
from fairseq.data.indexed_dataset import get_available_dataset_impl
from fairseq.dataclass import ChoiceEnum, FairseqDataclass
from fairseq.logging import metrics
from fairseq.tasks import FairseqTask, register_task
from omegaconf import II

from ..errors import ConfigError
from ..parsing.prepare import load_config
from ..parsing.schemes import get_scheme
from ..parsing.trees import Tree, read_treebank
from .parse_constraints import TargetSymbols, word_start_mask
from .parse_search import ParseConstrainedBeamSearch, ParseSequenceGenerator
from .parse_outputs import (F1_KEYS, F1Counts, InteractiveCodec, SplitCollector, hypothesis_tree, target_symbols,
                            words_from_source)

logger = logging.getLogger(__name__)


@dataclass
class ConstituencyParsingConfig(FairseqDataclass):
    data: Optional[str] = field(
        default=None, metadata={"help": "a directory made by python -m vaswani_plugin.parsing.prepare"})
    max_source_positions: int = field(default=1024, metadata={"help": "max source tokens (sentencepiece pieces)"})
    max_target_positions: int = field(default=1024, metadata={"help": "max target tokens (linearized tree)"})
    eval_f1: bool = field(
        default=False, metadata={"help": "decode the validation set and log EVALB F1 as `f1` (and the malformed-"
                                         "output rate as `malformed`), e.g. for --best-checkpoint-metric f1 "
                                         "--maximize-best-checkpoint-metric"})
    eval_f1_args: Optional[str] = field(
        default="{}", metadata={"help": 'generation args for --eval-f1 as JSON, e.g. \'{"beam": 4, "lenpen": 0.3, '
                                        '"max_len_a": 1, "max_len_b": 50}\''})
    eval_f1_print_samples: bool = field(
        default=False, metadata={"help": "log one predicted and gold tree per validation batch"})
    constrained_decoding: bool = field(
        default=False, metadata={"help": "beam search over well-formed trees only: balanced, correctly labelled "
                                         "brackets and exactly one pre-terminal per source word"})
    trees_output: Optional[str] = field(
        default=None, metadata={"help": "fairseq-generate: write the predicted trees here, one per line in input "
                                        "order, and the EVALB report to FILE.evalb"})
    train_subset: str = II("dataset.train_subset")
    dataset_impl: Optional[ChoiceEnum(get_available_dataset_impl())] = II("dataset.dataset_impl")
    required_seq_len_multiple: int = II("dataset.required_seq_len_multiple")


class ParseDataset(LanguagePairDataset):
    """A LanguagePairDataset whose batches say which split they come from (to find the gold trees)."""

    def __init__(self, *args, split: Optional[str] = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.split = split

    def collater(self, samples, pad_to_length=None):
        batch = super().collater(samples, pad_to_length=pad_to_length)
        if batch:
            batch["parse_split"] = self.split
        return batch


@register_task("constituency_parsing", dataclass=ConstituencyParsingConfig)
class ConstituencyParsingTask(FairseqTask):
    """Sentence (sentencepiece pieces) -> linearized constituency tree (Vinyals et al., 2015)."""

    cfg: ConstituencyParsingConfig

    def __init__(self, cfg: ConstituencyParsingConfig, src_dict, tgt_dict, prepared: dict):
        super().__init__(cfg)
        self.src_dict = src_dict
        self.tgt_dict = tgt_dict
        self.prepared = prepared
        self.word_start = word_start_mask(src_dict)
        self.reverse_source = bool(prepared.get("reverse_source", False))
        self.scheme = get_scheme(prepared["scheme"])
        self._gold: Dict[str, List[Tree]] = {}
        self._collectors: Dict[str, SplitCollector] = {}
        self._codec: Optional[InteractiveCodec] = None
        self._interactive_words: Dict[int, List[str]] = {}
        self._interactive_lines: Dict[tuple, collections.deque] = collections.defaultdict(collections.deque)
        self._next_line = 0
        self._nbest = 1
        self.sequence_generator = None

    @classmethod
    def setup_task(cls, cfg: ConstituencyParsingConfig, **kwargs):
        if not cfg.data:
            raise ConfigError("--task constituency_parsing needs DATA, a directory made by "
                              "python -m vaswani_plugin.parsing.prepare")
        data = utils.split_paths(cfg.data)[0]
        prepared = load_config(data)
        src_dict = cls.load_dictionary(os.path.join(data, f"dict.{prepared['source_lang']}.txt"))
        tgt_dict = cls.load_dictionary(os.path.join(data, f"dict.{prepared['target_lang']}.txt"))
        logger.info("constituency parsing (%s scheme%s): %d source pieces, %d target symbols", prepared["scheme"],
                    ", reversed source" if prepared.get("reverse_source") else "", len(src_dict), len(tgt_dict))
        if cfg.eval_f1:
            try:
                json.loads(cfg.eval_f1_args or "{}")
            except ValueError as error:
                raise ConfigError(f"--eval-f1-args must be a JSON object: {error}") from None
        return cls(cfg, src_dict, tgt_dict, prepared)

    @property
    def data_dir(self) -> str:
        return utils.split_paths(self.cfg.data)[0]

    # ------------------------------------------------------------------ data

    def load_dataset(self, split, epoch=1, combine=False, **kwargs):
        src_lang, tgt_lang = self.prepared["source_lang"], self.prepared["target_lang"]
        prefix = os.path.join(self.data_dir, f"{split}.{src_lang}-{tgt_lang}.")
        src = data_utils.load_indexed_dataset(prefix + src_lang, self.src_dict, self.cfg.dataset_impl)
        tgt = data_utils.load_indexed_dataset(prefix + tgt_lang, self.tgt_dict, self.cfg.dataset_impl)
        if src is None or tgt is None:
            raise FileNotFoundError(f"no split {split!r} in {self.data_dir} (prepared splits: "
                                    f"{', '.join(self.prepared['splits'])})")
        self.datasets[split] = ParseDataset(
            src, src.sizes, self.src_dict, tgt, tgt.sizes, self.tgt_dict, left_pad_source=True,
            left_pad_target=False, shuffle=(split != "test"), pad_to_multiple=self.cfg.required_seq_len_multiple,
            split=split)
        logger.info("%s: %d sentences", split, len(self.datasets[split]))

    def build_dataset_for_inference(self, src_tokens, src_lengths, constraints=None):
        return ParseDataset(src_tokens, src_lengths, self.src_dict, tgt_dict=self.tgt_dict, constraints=constraints)

    def gold_trees(self, split: str) -> List[Tree]:
        """The gold trees of a prepared split (words, tags and brackets for scoring)."""
        if split not in self._gold:
            info = self.prepared["splits"].get(split)
            if info is None:
                raise ConfigError(f"no gold trees for split {split!r} in {self.data_dir}")
            self._gold[split] = list(read_treebank(os.path.join(self.data_dir, info["trees"])))
        return self._gold[split]

    def get_batch_iterator(self, dataset, *args, **kwargs):
        # fairseq drops a last batch whose size is not a multiple of --required-batch-size-multiple;
        # outside training every sentence must be decoded and scored, so no multiple there.
        if dataset is not self.datasets.get(self.cfg.train_subset):
            if len(args) > 4:
                args = args[:4] + (1,) + args[5:]
            else:
                kwargs["required_batch_size_multiple"] = 1
        return super().get_batch_iterator(dataset, *args, **kwargs)

    # ------------------------------------------------------------------ generation

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
        search = ParseConstrainedBeamSearch(self.tgt_dict, TargetSymbols(self.tgt_dict, self.scheme))

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
        queue = self._interactive_lines.get(tuple(src_tokens.tolist()))
        if queue:
            line = queue.popleft()
            return self._interactive_words.pop(line), None, None, line
        return words_from_source(self.src_dict, src_tokens, self.reverse_source), None, None, None

    def _hypothesis_string(self, generator, tokens) -> str:
        """The hypothesis exactly as fairseq-interactive prints it (H- line)."""
        strip = getattr(generator, "symbols_to_strip_from_output", None) or {self.tgt_dict.eos()}
        return self.tgt_dict.string(tokens.int().cpu(), None, extra_symbols_to_ignore=strip)

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
                    collector = self._collectors[split] = SplitCollector(split, self.gold_trees(split),
                                                                         self.cfg.trees_output)
                symbols = target_symbols(self.tgt_dict, row_hypos[0]["tokens"]) if row_hypos else []
                tree, repairs = hypothesis_tree(symbols, words, tags, self.scheme)
                collector.add(int(sample["id"][row]), tree, repairs)
            elif line is not None and self._codec is not None:  # fairseq-interactive
                outputs = []
                for hypo in row_hypos[: self._nbest]:
                    tree, _ = hypothesis_tree(target_symbols(self.tgt_dict, hypo["tokens"]), words, None, self.scheme)
                    outputs.append((self._hypothesis_string(generator, hypo["tokens"]),
                                    tree.to_string() if tree is not None else ""))
                self._codec.add(line, outputs)
        return hypos

    # ------------------------------------------------------------------ fairseq-interactive

    def build_tokenizer(self, args):
        return None

    def build_bpe(self, args):
        if getattr(args, "bpe", None):
            logger.warning("--bpe %s is ignored: the task encodes the source with its own sentencepiece model",
                           args.bpe)
        if self._codec is None:
            self._codec = InteractiveCodec(os.path.join(self.data_dir, self.prepared["spm_model"]), self.reverse_source)
        return self._codec

    def get_interactive_tokens_and_lengths(self, lines, encode_fn):
        tokens = []
        for line in lines:  # remember each line's words, to put them back into its tree
            ids = self.src_dict.encode_line(encode_fn(line), add_if_not_exist=False).long()
            self._next_line += 1
            self._interactive_words[self._next_line] = line.split()
            self._interactive_lines[tuple(ids.tolist())].append(self._next_line)
            tokens.append(ids)
        return tokens, [t.numel() for t in tokens]

    # ------------------------------------------------------------------ training with --eval-f1

    def build_model(self, cfg, from_checkpoint=False):
        model = super().build_model(cfg, from_checkpoint)
        if self.cfg.eval_f1:
            gen_args = json.loads(self.cfg.eval_f1_args or "{}")
            self.sequence_generator = self.build_generator([model], Namespace(**gen_args))
        return model

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

    # ------------------------------------------------------------------ sizes and dictionaries

    def max_positions(self):
        return (self.cfg.max_source_positions, self.cfg.max_target_positions)

    @property
    def source_dictionary(self):
        return self.src_dict

    @property
    def target_dictionary(self):
        return self.tgt_dict
