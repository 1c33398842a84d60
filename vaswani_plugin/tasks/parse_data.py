"""`--task constituency_parsing`, data: the prepared splits, their gold trees, and batches that drop nothing.

Outside training, batches are never required to be a multiple of `--required-batch-size-multiple`:
fairseq 0.12 drops a last batch that is not, and every sentence must get its tree. The ids of the
sentences each split's batches hold are recorded, so that the trees of a decoded split are written
as soon as the last of them is decoded (sentences left out, e.g. by
`--skip-invalid-size-inputs-valid-test`, are known from the start).
"""
import logging
import os
from typing import Dict, List, Optional, Set

from fairseq.data import LanguagePairDataset, data_utils

from ..errors import ConfigError
from ..parsing.trees import Tree, read_treebank

logger = logging.getLogger(__name__)


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


class ParseDataMixin:
    """The task's data methods (the task sets `src_dict`, `tgt_dict`, `prepared`, `data_dir`, `cfg`)."""

    _gold: Dict[str, List[Tree]]
    batched_ids: Dict[str, Set[int]]

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
        training = dataset is self.datasets.get(self.cfg.train_subset)
        if not training:
            if len(args) > 4:
                args = args[:4] + (1,) + args[5:]
            else:
                kwargs["required_batch_size_multiple"] = 1
        iterator = super().get_batch_iterator(dataset, *args, **kwargs)
        split = getattr(dataset, "split", None)
        if not training and split is not None:
            # the batches this process will see: fairseq's ShardedIterator takes every num_shards-th one
            batches = iterator.frozen_batches[iterator.shard_id::iterator.num_shards]
            self.batched_ids[split] = {int(i) for batch in batches for i in batch}
        return iterator
