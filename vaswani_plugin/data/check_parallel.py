"""`python -m vaswani_plugin.data.check_parallel`: check, or clean, a parallel corpus before it is used.

    python -m vaswani_plugin.data.check_parallel check SRC TGT [SRC TGT ...]
    python -m vaswani_plugin.data.check_parallel clean SRC TGT [SRC TGT ...] --out-prefix OUT \\
        --suffixes en de [--max-words 250] [--max-ratio 1.5]

Both stop with one line naming the file and line when the input cannot be a parallel corpus:
- a line that is not UTF-8 (the byte and its column are named);
- a different number of lines in SRC and TGT (the first unmatched line is named);
- with `check`, a carriage return inside a line: Python's text reading (sentencepiece encoding,
  fairseq-preprocess) would split that line in two and shift every later sentence against its
  translation (`clean` writes it as a space).

`check` also refuses an empty (or blank) line: generated corpora and test sets must have none.
`clean` is for raw training corpora, where empty lines and misaligned pairs are expected: it writes
all pairs of files, in order, to OUT.{src suffix} and OUT.{tgt suffix} without the pairs that have
an empty side, a side longer than --max-words whitespace-separated words, or a word-count ratio above
--max-ratio, and prints how many of each were removed. The paper does not describe its cleaning; these are the limits of fairseq's
WMT14 preparation (Moses' clean-corpus-n.perl with ratio 1.5, 250 tokens), applied to raw words.
"""
from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator
from itertools import zip_longest

from ..errors import ConfigError

PROG = "python -m vaswani_plugin.data.check_parallel"


def _decoded_lines(path: str, strict: bool) -> Iterator[tuple[int, str]]:
    """(line number, text without its newline) for every line of `path`; ConfigError at the first
    line that is not UTF-8, or (when `strict`) holds a carriage return, which is otherwise replaced
    by a space."""
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, 1):
            raw = raw.rstrip(b"\n")
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as error:
                raise ConfigError(f"{path} line {number}: byte 0x{raw[error.start]:02x} at byte {error.start + 1} "
                                  "is not UTF-8; expected UTF-8 text") from None
            if "\r" in text and not strict:
                text = text.replace("\r", " ")
            elif "\r" in text:
                raise ConfigError(f"{path} line {number}: carriage return inside the line; expected one sentence "
                                  "per line with Unix line ends (convert with: sed -i 's/\\r//g' FILE)")
            yield number, text


def _count_lines(path: str) -> int:
    with open(path, "rb") as handle:
        return sum(1 for _ in handle)


def pairs(src: str, tgt: str, strict: bool = True) -> Iterator[tuple[int, str, str]]:
    """(line number, source line, target line) of two parallel files; ConfigError on bad bytes or
    when one file ends before the other."""
    for path in (src, tgt):
        if not os.path.isfile(path):
            raise ConfigError(f"{path}: no such file")
    lines = zip_longest(_decoded_lines(src, strict), _decoded_lines(tgt, strict), fillvalue=(None, None))
    for (number_s, line_s), (number_t, line_t) in lines:
        if number_s is None or number_t is None:
            longer, number = (tgt, number_t) if number_s is None else (src, number_s)
            raise ConfigError(f"{src} has {_count_lines(src)} lines but {tgt} has {_count_lines(tgt)}; "
                              f"{longer} line {number} has no counterpart; expected one line per sentence "
                              "pair in both files")
        yield number_s, line_s, line_t


def check(src: str, tgt: str) -> int:
    """Strict check (no empty line anywhere); returns the number of pairs."""
    count = 0
    for count, line_s, line_t in pairs(src, tgt):
        for path, line in ((src, line_s), (tgt, line_t)):
            if not line.strip():
                raise ConfigError(f"{path} line {count}: empty line; expected a sentence on every line")
    return count


def clean(file_pairs, out_src: str, out_tgt: str, max_words: int = 250, max_ratio: float = 1.5) -> dict:
    """Write the pairs of every (src, tgt) of `file_pairs` that pass the length filters, in order, to
    `out_src`/`out_tgt`; returns the counts per reason."""
    counts = {"read": 0, "kept": 0, "empty": 0, "too_long": 0, "ratio": 0}
    # Written under .part names and renamed at the end: an interrupted run leaves no output that
    # looks finished.
    with open(out_src + ".part", "w", encoding="utf-8") as o_s, open(out_tgt + ".part", "w", encoding="utf-8") as o_t:
        for _, line_s, line_t in (pair for src, tgt in file_pairs for pair in pairs(src, tgt, strict=False)):
            counts["read"] += 1
            n_s, n_t = len(line_s.split()), len(line_t.split())
            if n_s == 0 or n_t == 0:
                counts["empty"] += 1
            elif max(n_s, n_t) > max_words:
                counts["too_long"] += 1
            elif max(n_s, n_t) > max_ratio * min(n_s, n_t):
                counts["ratio"] += 1
            else:
                counts["kept"] += 1
                o_s.write(line_s.strip() + "\n")
                o_t.write(line_t.strip() + "\n")
    os.replace(out_src + ".part", out_src)
    os.replace(out_tgt + ".part", out_tgt)
    return counts


def _file_pairs(parser, files):
    if len(files) % 2:
        parser.error(f"expected pairs of files (SRC TGT [SRC TGT ...]), got {len(files)} names")
    return list(zip(files[::2], files[1::2]))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("check", help="refuse bad bytes, unequal line counts and empty lines")
    c.add_argument("files", nargs="+", metavar="SRC TGT", help="one or more pairs of parallel files")
    k = sub.add_parser("clean", help="refuse bad bytes and unequal line counts; drop empty and badly "
                                     "proportioned pairs")
    k.add_argument("files", nargs="+", metavar="SRC TGT", help="one or more pairs of parallel files, "
                   "cleaned into one output in this order")
    k.add_argument("--out-prefix", required=True, help="writes OUT.SRC_SUFFIX and OUT.TGT_SUFFIX")
    k.add_argument("--suffixes", nargs=2, required=True, metavar=("SRC_SUFFIX", "TGT_SUFFIX"))
    k.add_argument("--max-words", type=int, default=250, help="longest side kept (default: %(default)s)")
    k.add_argument("--max-ratio", type=float, default=1.5,
                   help="largest word-count ratio between the sides (default: %(default)s)")
    args = parser.parse_args(argv)
    file_pairs = _file_pairs(parser, args.files)
    try:
        if args.command == "check":
            for src, tgt in file_pairs:
                print(f"{src}, {tgt}: {check(src, tgt)} sentence pairs, UTF-8, none empty")
        else:
            out_src, out_tgt = (f"{args.out_prefix}.{suffix}" for suffix in args.suffixes)
            n = clean(file_pairs, out_src, out_tgt, args.max_words, args.max_ratio)
            print(f"kept {n['kept']} of {n['read']} pairs; removed {n['empty']} with an empty side, "
                  f"{n['too_long']} longer than {args.max_words} words, {n['ratio']} with a word-count ratio "
                  f"above {args.max_ratio}; wrote {out_src}, {out_tgt}")
    except ConfigError as error:
        print(f"{PROG}: error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
