"""`--task constituency_parsing`, fairseq-interactive: a typed sentence in, its tree out as the `D-` line.

The task's `bpe` (:class:`InteractiveCodec`) encodes a typed sentence (words separated by spaces) into
source pieces with the prepared sentencepiece model, and turns the hypothesis string fairseq-interactive
prints into the tree the task built for it (predicted tags: XX in the "vinyals" scheme).
"""
import collections
import logging
import os
from typing import Dict, List, Optional, Tuple

from ..parsing.prepare import WORD_START, encode_source
from .parse_generation import hypothesis_tree, target_symbols

logger = logging.getLogger(__name__)


def words_from_source(src_dict, tokens, reverse_source: bool) -> List[str]:
    """Best-effort words from source pieces (the prepared data keeps the real words; this is the fallback)."""
    pieces = [src_dict[i] for i in tokens.tolist() if i >= src_dict.nspecial or i == src_dict.unk()]
    words = "".join(pieces).replace(WORD_START, " ").split()
    return words[::-1] if reverse_source else words


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


class ParseInteractiveMixin:
    """The task's fairseq-interactive methods (the task sets `src_dict`, `tgt_dict`, `scheme`, ...)."""

    def init_interactive(self) -> None:
        """Called by the task's __init__: no codec yet, no typed lines."""
        self._codec: Optional[InteractiveCodec] = None
        self._interactive_words: Dict[int, List[str]] = {}  # input line number -> its words
        self._interactive_lines: Dict[tuple, collections.deque] = collections.defaultdict(collections.deque)
        self._next_line = 0

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

    def interactive_words(self, src_tokens) -> Tuple[List[str], Optional[int]]:
        """(words, input line number) of a typed sentence; line None for a source not typed here."""
        queue = self._interactive_lines.get(tuple(src_tokens.tolist()))
        if queue:
            line = queue.popleft()
            return self._interactive_words.pop(line), line
        return words_from_source(self.src_dict, src_tokens, self.reverse_source), None

    def interactive_outputs(self, generator, line: int, words: List[str], hypos) -> None:
        """Hand the trees of one typed line's hypotheses (best first) to the codec's `decode`."""
        if self._codec is None:
            return
        strip = getattr(generator, "symbols_to_strip_from_output", None) or {self.tgt_dict.eos()}
        outputs = []
        for hypo in hypos:
            tree, _ = hypothesis_tree(target_symbols(self.tgt_dict, hypo["tokens"]), words, None, self.scheme)
            printed = self.tgt_dict.string(hypo["tokens"].int().cpu(), None, extra_symbols_to_ignore=strip)
            outputs.append((printed, tree.to_string() if tree is not None else ""))
        self._codec.add(line, outputs)
