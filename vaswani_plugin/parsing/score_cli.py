"""``vaswani-parse-score``: score predicted trees against gold trees, EVALB style.

    vaswani-parse-score --gold test.trees --pred predicted.trees [--params collins] [--normalize-roots]

Prints EVALB's report (per-sentence lines, the all-lengths and len<=40
summaries), then the scores with failed sentences counted as empty parses.

The trees are scored as written, as EVALB scores them: traces, punctuation
and function tags are handled by the parameter set, and a root counts as a
bracket unless its label is deleted (COLLINS.prm deletes only ``TOP``). So a
raw ``.mrg`` gold tree ``( (S ...) )`` has an unlabelled root bracket that a
prediction ``(S ...)`` misses. ``--normalize-roots`` removes such a wrapper
(unlabelled, ``TOP`` or ``ROOT`` around a single phrase) from both files
first, as ``python -m vaswani_plugin.parsing.prepare`` does with gold trees.
EVALB reads one tree per line; multi-line ``.mrg`` trees are accepted and
scored as EVALB scores the same trees written one per line.
A file that cannot be read or parsed gives one line naming the file and line
on stderr and exit status 1.
"""

from __future__ import annotations

import argparse
import sys
from typing import List, Optional

from .evalb import PARAMS, evalb_score, format_report
from .trees import TreebankError, read_treebank

PROG = "vaswani-parse-score"


def build_parser() -> argparse.ArgumentParser:
    """The command-line parser."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Score predicted constituency trees against gold trees with EVALB's rules "
                    "and print an EVALB-style report.",
    )
    parser.add_argument("--gold", required=True, metavar="GOLD",
                        help="gold trees: a Penn Treebank .mrg file (multi-line trees) or one tree per line; "
                             "traces and function tags are removed on reading")
    parser.add_argument("--pred", required=True, metavar="PRED",
                        help="predicted trees, one per gold tree and in the same order, in either format")
    parser.add_argument("--params", default="collins", choices=sorted(PARAMS),
                        help="EVALB parameter set; 'collins' is COLLINS.prm, the standard for published "
                             "Penn Treebank results (default: %(default)s)")
    parser.add_argument("--normalize-roots", action="store_true",
                        help="remove a root wrapper ('( (S ...) )', TOP or ROOT around one phrase) from both files "
                             "before scoring; without it the trees are scored as EVALB scores them, which counts "
                             "an unlabelled or ROOT root as a bracket")
    parser.add_argument("--summary-only", action="store_true",
                        help="leave out the per-sentence lines")
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    """Run the command; returns the exit status (0 ok, 1 bad input, 2 bad usage)."""
    args = build_parser().parse_args(argv)
    try:
        # as EVALB sees the trees: traces, function tags and punctuation are left to the parameter set
        read = dict(remove_traces=False, strip_tags=False, normalise_root=args.normalize_roots)
        gold = read_treebank(args.gold, **read)
        pred = read_treebank(args.pred, **read)
    except TreebankError as error:
        print(f"{PROG}: error: {error}", file=sys.stderr)
        return 1
    if len(gold) != len(pred):
        print(f"{PROG}: error: {args.pred} has {len(pred)} trees but {args.gold} has {len(gold)}; "
              "expected one predicted tree per gold tree", file=sys.stderr)
        return 1
    report = evalb_score(gold, pred, PARAMS[args.params])
    sys.stdout.write(format_report(report, per_sentence=not args.summary_only))
    return 0


if __name__ == "__main__":
    sys.exit(main())
