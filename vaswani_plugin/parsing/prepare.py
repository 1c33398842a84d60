"""`python -m vaswani_plugin.parsing.prepare`: Penn Treebank trees -> a directory for `--task constituency_parsing`.

    python -m vaswani_plugin.parsing.prepare --train wsj_02*.mrg --valid wsj_22*.mrg --test wsj_23*.mrg \\
        --out data-bin/wsj [--scheme vinyals|tags] [--reverse-source] [--vocab-size 16000] [--skip-bad-trees]

For every split the trees are read (`.mrg` files or one tree per line; traces and function tags
removed), linearized (`vaswani_plugin.parsing.linearize_tree`), and written out; a sentencepiece BPE
model is learned on the training words only (§6.3: a 16K vocabulary for WSJ only; on small data the
size is capped at what sentencepiece can learn, and the size used is recorded), the source words are
encoded with it, and fairseq's own preprocessing binarizes source and target with separate
dictionaries. The output directory holds:

    parse_config.json            what the task reads: scheme, reverse_source, splits, spm model, ...
    spm.model, spm.vocab         the source sentencepiece model
    dict.src.txt, dict.tgt.txt   fairseq dictionaries (source: every sentencepiece piece)
    {split}.src-tgt.{src,tgt}.{bin,idx}   binarized data
    gold/{split}.trees           the normalised gold trees, one per line (scoring uses their words and tags)
    text/{split}.{words,src,tgt} the plain-text words, encoded source and target sequences
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import re
import sys
from typing import Dict, List, Optional, Sequence

from ..errors import ConfigError
from .linearize import linearize_tree
from .schemes import get_scheme, scheme_names
from .trees import Tree, TreebankError, read_treebank

CONFIG_NAME = "parse_config.json"
FORMAT_VERSION = 1
SOURCE_LANG, TARGET_LANG = "src", "tgt"
SPM_PREFIX = "spm"
#: sentencepiece marks the first piece of every word with this character.
WORD_START = "\u2581"
SPLITS = ("train", "valid", "test")

_TOO_HIGH = re.compile(r"Vocabulary size too high \((\d+)\)\. Please set it to a value <= (\d+)")


def read_split(files: Sequence[str], skip_bad_trees: bool) -> tuple:
    """All trees of `files`, in order, and the number of bad trees skipped."""
    trees: List[Tree] = []
    skipped = 0
    for path in files:
        try:
            bank = read_treebank(path, skip_bad_trees=skip_bad_trees)
        except TreebankError as error:
            raise ConfigError(f"{error} (pass --skip-bad-trees to leave bad trees out)") from None
        trees.extend(bank)
        skipped += bank.skipped
        for error in bank.errors:
            logging.getLogger(__name__).warning("skipped a bad tree: %s", error)
    return trees, skipped


def train_spm(words_file: str, prefix: str, vocab_size: int) -> int:
    """Learn a BPE model on `words_file`; returns the vocabulary size actually used.

    With little data sentencepiece cannot reach a large vocabulary and says so with the largest size
    it can reach; that size is then used instead (logged)."""
    from ..data import spm

    size = vocab_size
    for _ in range(3):
        try:
            spm.train([words_file], prefix, size, model_type="bpe", threads=1, normalization="identity")
            if size != vocab_size:
                logging.getLogger(__name__).info("sentencepiece: --vocab-size %d is more than the %d pieces the "
                                                 "training words allow; using %d", vocab_size, size, size)
            return size
        except RuntimeError as error:
            found = _TOO_HIGH.search(str(error))
            if not found:
                raise
            size = int(found.group(2))
    raise ConfigError(f"--vocab-size: sentencepiece could not learn a vocabulary of {vocab_size} pieces")


def write_source_dictionary(spm_vocab: str, path: str) -> None:
    """fairseq dictionary of every sentencepiece piece, so a piece never becomes <unk> in fairseq."""
    with open(spm_vocab, encoding="utf-8") as src, open(path, "w", encoding="utf-8") as out:
        for line in src:
            piece = line.split("\t")[0]
            if piece and piece != "<unk>":
                out.write(f"{piece} 1\n")


def _binarize(out: str, splits: Sequence[str], src_dict: str) -> None:
    """fairseq's own preprocessing (fairseq_cli.preprocess), run in this process."""
    from fairseq import options
    from fairseq_cli import preprocess

    argv = ["--source-lang", SOURCE_LANG, "--target-lang", TARGET_LANG, "--destdir", out, "--srcdict", src_dict,
            "--workers", "1", "--padding-factor", "1", "--thresholdtgt", "0"]
    for split in splits:
        argv += [f"--{split}pref", os.path.join(out, "text", split)]
    args = options.get_preprocessing_parser().parse_args(argv)
    try:
        preprocess.main(args)
    finally:  # fairseq adds a log-file handler per call; close ours
        for handler in list(preprocess.logger.handlers):
            if isinstance(handler, logging.FileHandler) and os.path.dirname(handler.baseFilename) == \
                    os.path.abspath(out):
                preprocess.logger.removeHandler(handler)
                handler.close()


def prepare(files: Dict[str, Sequence[str]], out: str, scheme: str = "vinyals", reverse_source: bool = False,
            vocab_size: int = 16000, skip_bad_trees: bool = False) -> dict:
    """Prepare `files` ({split: [paths]}, splits among train/valid/test) into `out`; returns the config."""
    if scheme not in scheme_names():
        raise ConfigError(f"--scheme must be one of {', '.join(scheme_names())}, got {scheme!r}")
    if vocab_size < 2:
        raise ConfigError(f"--vocab-size must be at least 2, got {vocab_size}")
    for split in ("train", "valid"):
        if not files.get(split):
            raise ConfigError(f"--{split} needs at least one treebank file")
    if os.path.exists(os.path.join(out, CONFIG_NAME)):
        raise ConfigError(f"--out {out} already holds prepared data; remove it or choose another directory")
    splits = [split for split in SPLITS if files.get(split)]
    os.makedirs(os.path.join(out, "gold"), exist_ok=True)
    os.makedirs(os.path.join(out, "text"), exist_ok=True)
    config = {"format": FORMAT_VERSION, "scheme": scheme, "reverse_source": reverse_source,
              "source_lang": SOURCE_LANG, "target_lang": TARGET_LANG, "spm_model": f"{SPM_PREFIX}.model",
              "vocab_size_requested": vocab_size, "splits": {}}
    for split in splits:
        trees, skipped = read_split(files[split], skip_bad_trees)
        if not trees:
            raise ConfigError(f"--{split}: no trees in {', '.join(files[split])}")
        gold = os.path.join("gold", f"{split}.trees")
        with open(os.path.join(out, gold), "w", encoding="utf-8") as g, \
                open(os.path.join(out, "text", f"{split}.words"), "w", encoding="utf-8") as w, \
                open(os.path.join(out, "text", f"{split}.{TARGET_LANG}"), "w", encoding="utf-8") as t:
            for tree in trees:
                _, target = linearize_tree(tree, scheme)
                g.write(tree.to_string() + "\n")
                w.write(" ".join(tree.words()) + "\n")
                t.write(" ".join(target) + "\n")
        config["splits"][split] = {"trees": gold, "sentences": len(trees), "skipped_bad_trees": skipped,
                                   "files": [os.path.abspath(path) for path in files[split]]}

    prefix = os.path.join(out, SPM_PREFIX)
    config["vocab_size"] = train_spm(os.path.join(out, "text", "train.words"), prefix, vocab_size)
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=prefix + ".model")
    for split in splits:
        with open(os.path.join(out, "text", f"{split}.words"), encoding="utf-8") as w, \
                open(os.path.join(out, "text", f"{split}.{SOURCE_LANG}"), "w", encoding="utf-8") as s:
            for line in w:
                s.write(encode_source(sp, line.split(), reverse_source) + "\n")
    src_dict = os.path.join(out, "text", "dict.src.txt")
    write_source_dictionary(prefix + ".vocab", src_dict)
    _binarize(out, splits, src_dict)
    with open(os.path.join(out, CONFIG_NAME), "w", encoding="utf-8") as handle:
        json.dump(config, handle, indent=2)
        handle.write("\n")
    return config


def encode_source(sp, words: Sequence[str], reverse_source: bool) -> str:
    """The source line the model reads: the words (reversed with --reverse-source) as pieces."""
    words = list(reversed(words)) if reverse_source else list(words)
    return " ".join(sp.encode(" ".join(words), out_type=str))


def load_config(data: str) -> dict:
    """The `parse_config.json` of a prepared directory (ConfigError if there is none)."""
    path = os.path.join(data, CONFIG_NAME)
    if not os.path.isfile(path):
        raise ConfigError(f"DATA {data} is not a prepared parsing directory (no {CONFIG_NAME}); "
                          "make one with python -m vaswani_plugin.parsing.prepare")
    with open(path, encoding="utf-8") as handle:
        config = json.load(handle)
    if config.get("format") != FORMAT_VERSION:
        raise ConfigError(f"{path}: format {config.get('format')!r}, expected {FORMAT_VERSION}; prepare it again")
    return config


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m vaswani_plugin.parsing.prepare", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--train", nargs="+", required=True, metavar="FILE", help="training treebank files")
    parser.add_argument("--valid", nargs="+", required=True, metavar="FILE", help="validation treebank files")
    parser.add_argument("--test", nargs="+", metavar="FILE", help="test treebank files (optional)")
    parser.add_argument("--out", required=True, help="output directory (the task's DATA)")
    parser.add_argument("--scheme", choices=scheme_names(), default="vinyals",
                        help="the target linearization: " + "; ".join(
                            f"'{name}': {get_scheme(name).help}" for name in scheme_names()) +
                        " (default: %(default)s)")
    parser.add_argument("--reverse-source", action="store_true",
                        help="feed the source words in reverse order (Vinyals et al.'s LSTM did)")
    parser.add_argument("--vocab-size", type=int, default=16000,
                        help="sentencepiece vocabulary of the source words; capped at what the training words "
                             "allow (default: %(default)s, the paper's WSJ-only setting)")
    parser.add_argument("--skip-bad-trees", action="store_true",
                        help="leave malformed trees out (and say so) instead of stopping at the first one")
    args = parser.parse_args(argv)
    logging.basicConfig(format="%(levelname)s: %(message)s", level=logging.INFO)
    config = prepare({"train": args.train, "valid": args.valid, "test": args.test or []}, args.out, args.scheme,
                     args.reverse_source, args.vocab_size, args.skip_bad_trees)
    for split, info in config["splits"].items():
        print(f"{split}: {info['sentences']} trees ({info['skipped_bad_trees']} bad trees skipped)")
    print(f"source vocabulary: {config['vocab_size']} sentencepiece pieces; prepared data in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
