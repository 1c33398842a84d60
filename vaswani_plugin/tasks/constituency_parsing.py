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

fairseq-generate prints its usual S/T/H/D lines (H: the linearized tree) and, once the last sentence
of the split's batches is decoded, `Parse SPLIT: ...` lines: the number of trees, the EVALB (COLLINS) F1 and
the malformed-output (repair) counts; `--trees-output FILE` writes the trees, one per sentence in
input order, and FILE.evalb the full EVALB report. Trees are scored, and written, with the gold POS
tags (the usual practice, and the only one possible with the "vinyals" XX scheme). fairseq-interactive
prints the tree as the `D-` line (predicted tags: XX in the "vinyals" scheme).

The task is one class built from one mixin per concern: `parse_data` (splits, gold trees, batches),
`parse_generation` (the generator, trees and their EVALB summary), `parse_interactive`
(fairseq-interactive) and `parse_metrics` (`--eval-f1`); `parse_constraints` and `parse_search` are
the constrained search.
"""
import json
import logging
import os
from argparse import Namespace
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Set

from fairseq import utils
from fairseq.data.indexed_dataset import get_available_dataset_impl
from fairseq.dataclass import ChoiceEnum, FairseqDataclass
from fairseq.tasks import FairseqTask, register_task
from omegaconf import II

from ..errors import ConfigError
from ..parsing.prepare import load_config
from ..parsing.schemes import get_scheme
from ..parsing.trees import Tree
from .parse_constraints import TargetSymbols, word_start_mask
from .parse_data import ParseDataMixin
from .parse_generation import ParseGenerationMixin, SplitCollector
from .parse_interactive import ParseInteractiveMixin
from .parse_metrics import ParseMetricsMixin

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


@register_task("constituency_parsing", dataclass=ConstituencyParsingConfig)
class ConstituencyParsingTask(ParseDataMixin, ParseGenerationMixin, ParseInteractiveMixin, ParseMetricsMixin,
                              FairseqTask):
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
        self._target_symbols: Optional[TargetSymbols] = None
        self._gold: Dict[str, List[Tree]] = {}
        self.batched_ids: Dict[str, Set[int]] = {}  # split -> ids of the sentences its batches hold
        self._collectors: Dict[str, SplitCollector] = {}
        self._nbest = 1
        self.init_interactive()
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
    def target_symbols(self) -> TargetSymbols:
        """The target dictionary's symbols sorted by the scheme (brackets, pre-terminals), built once."""
        if self._target_symbols is None:
            self._target_symbols = TargetSymbols(self.tgt_dict, self.scheme)
        return self._target_symbols

    @property
    def data_dir(self) -> str:
        return utils.split_paths(self.cfg.data)[0]

    # ------------------------------------------------------------------ training with --eval-f1

    def build_model(self, cfg, from_checkpoint=False):
        model = super().build_model(cfg, from_checkpoint)
        if self.cfg.eval_f1:
            gen_args = json.loads(self.cfg.eval_f1_args or "{}")
            self.sequence_generator = self.build_generator([model], Namespace(**gen_args))
        return model

    # ------------------------------------------------------------------ sizes and dictionaries

    def max_positions(self):
        return (self.cfg.max_source_positions, self.cfg.max_target_positions)

    @property
    def source_dictionary(self):
        return self.src_dict

    @property
    def target_dictionary(self):
        return self.tgt_dict
