"""A small synthetic treebank: trees sampled from an English-like PCFG.

The grammar uses Penn Treebank labels and POS tags and produces the shapes a
parser meets in the WSJ treebank after traces are removed: S, SBAR (that-
clauses, adverbial and relative clauses), NP, VP, PP, ADJP, ADVP, QP, PRT,
PRN, WHNP, coordination, appositives, possessives, quotes and punctuation.
It lets the parsing pipeline be trained and tested without the (licensed)
Penn Treebank. Sampling is deterministic for a seed (``random.Random``);
sentences have 4 to 40 words.

    python -m vaswani_plugin.parsing.synthetic_treebank --out DIR

writes ``DIR/train.trees``, ``DIR/valid.trees`` and ``DIR/test.trees`` (one
tree per line; 20000/1000/1000 trees by default). Validation and test
sentences never repeat a training sentence or each other.
"""

from __future__ import annotations

import argparse
import bisect
import os
import random
import sys
from typing import Dict, List, Optional, Sequence, Set, Tuple

from .trees import Tree

MIN_WORDS = 4
MAX_WORDS = 40
#: Most levels of phrases below the root; bounds recursion (NP -> NP PP, S -> S CC S, ...).
MAX_HEIGHT = 9

# Symbols are "LABEL" or "LABEL:variant"; the tree label is the part before ":".
# Each rule is (weight, right-hand side). A symbol that is in LEXICON is a POS tag.
GRAMMAR: Dict[str, List[Tuple[float, Tuple[str, ...]]]] = {
    "S:top": [
        (40, ("NP", "VP", ".")),
        (8, ("PP", ",", "NP", "VP", ".")),
        (6, ("ADVP", ",", "NP", "VP", ".")),
        (8, ("S", ",", "CC", "S", ".")),
        (6, ("SBAR:adv", ",", "NP", "VP", ".")),
        (4, ("``", "S", ",", "''", "NP", "VP:say", ".")),
        (3, ("S", ":", "S", ".")),
        (4, ("NP", "ADVP", "VP", ".")),
        (2, ("NP", "VP")),
    ],
    "S": [(70, ("NP", "VP")), (8, ("NP", "ADVP", "VP")), (6, ("PP", ",", "NP", "VP")), (5, ("S", "CC", "S"))],
    "S:inf": [(1, ("VP:to",))],
    "S:subjgap": [(1, ("VP",))],  # relative clause whose subject trace was removed
    "S:objgap": [(1, ("NP", "VP:objgap"))],  # ... whose object trace was removed
    "VP": [
        (18, ("VBD", "NP")), (10, ("VBD", "NP", "PP")), (8, ("VBD", "PP")), (6, ("VBD",)),
        (6, ("VBZ", "NP")), (5, ("VBZ", "ADJP")), (5, ("VBD", "SBAR:that")), (6, ("MD", "VP:base")),
        (4, ("VBD", "PRT", "NP")), (4, ("VBD", "ADVP")), (5, ("VP", "CC", "VP")), (4, ("VBD", "S:inf")),
        (4, ("VBP", "NP")), (3, ("VBD", "NP", "SBAR:adv")), (3, ("VBZ", "VP:ing")), (3, ("VBD:be", "VP:pass")),
    ],
    "VP:base": [(6, ("VB", "NP")), (3, ("VB",)), (3, ("VB", "NP", "PP")), (2, ("VB", "PRT", "NP")),
                (2, ("VB", "ADVP"))],
    "VP:to": [(1, ("TO", "VP:base"))],
    "VP:ing": [(3, ("VBG", "NP")), (1, ("VBG",)), (1, ("VBG", "PP"))],
    "VP:pass": [(3, ("VBN", "PP:by")), (2, ("VBN",)), (1, ("VBN", "PP"))],
    "VP:say": [(1, ("VBD:say",))],
    "VP:objgap": [(3, ("VBD",)), (1, ("VBD", "PP"))],
    "NP": [
        (20, ("DT", "NN")), (10, ("DT", "JJ", "NN")), (7, ("NNP", "NNP")), (6, ("NNP",)), (6, ("PRP",)),
        (8, ("NNS",)), (6, ("JJ", "NNS")), (5, ("PRP$", "NN")), (4, ("CD", "NNS")), (3, ("QP", "NNS")),
        (2, ("$", "CD")), (2, ("DT", "ADJP", "NN")), (3, ("NP:poss", "NN")), (9, ("NP", "PP")),
        (5, ("NP", "SBAR:rel")), (4, ("NP", "CC", "NP")), (2, ("NP", ",", "NP", ",")), (2, ("NP", "PRN")),
    ],
    "NP:poss": [(2, ("DT", "NN", "POS")), (1, ("NNP", "POS"))],
    "PRN": [(1, ("-LRB-", "NP", "-RRB-"))],
    "QP": [(3, ("RB:qp", "CD")), (2, ("IN:qp", "CD")), (2, ("CD", "TO", "CD")), (2, ("JJR:qp", "IN:than", "CD"))],
    "ADJP": [(5, ("JJ",)), (4, ("RB", "JJ")), (2, ("JJ", "PP")), (2, ("JJR",)), (1, ("JJ", "CC", "JJ"))],
    "ADVP": [(6, ("RB",)), (2, ("RB", "RB")), (1, ("RBR",))],
    "PRT": [(1, ("RP",))],
    "PP": [(10, ("IN", "NP")), (2, ("TO", "NP"))],
    "PP:by": [(1, ("IN:by", "NP"))],
    "SBAR:that": [(3, ("IN:that", "S")), (1, ("S",))],  # (SBAR (S ...)): the null complementizer was removed
    "SBAR:adv": [(1, ("IN:sub", "S"))],
    "SBAR:rel": [(3, ("WHNP", "S:subjgap")), (1, ("WHNP", "S:objgap"))],
    "WHNP": [(3, ("WDT",)), (2, ("WP",))],
}

LEXICON: Dict[str, Sequence[str]] = {
    "DT": ("the", "a", "this", "that", "every", "some", "no", "another"),
    "NN": ("company", "market", "board", "director", "year", "report", "price", "deal", "bank", "plan",
           "group", "week", "share", "unit", "analyst", "investor", "contract", "loss"),
    "NNS": ("companies", "markets", "shares", "prices", "investors", "analysts", "years", "sales", "profits",
            "bonds", "rates", "workers", "funds", "banks"),
    "NNP": ("Vinken", "Elsevier", "Lorillard", "Mr.", "Ms.", "Smith", "Chicago", "Tokyo", "Monday", "IBM",
            "Friday", "Texas", "Nissan", "Jones"),
    "PRP": ("it", "he", "she", "they", "we", "I"),
    "PRP$": ("its", "his", "her", "their", "our"),
    "JJ": ("new", "big", "old", "strong", "weak", "early", "nonexecutive", "federal", "major", "small",
           "recent", "high", "low", "British"),
    "JJR": ("higher", "lower", "better"),
    "JJR:qp": ("more", "fewer"),
    "RB": ("also", "still", "quickly", "now", "already", "n't", "sharply", "very", "just", "only"),
    "RB:qp": ("about", "nearly", "almost"),
    "RBR": ("earlier", "later"),
    "VBD": ("bought", "sold", "rose", "fell", "joined", "reported", "expected", "announced", "made", "took",
            "cut", "won"),
    "VBD:be": ("was", "were"),
    "VBD:say": ("said", "added", "argued"),
    "VBZ": ("is", "has", "seems", "owns", "expects", "makes"),
    "VBP": ("are", "have", "own", "expect", "make"),
    "VB": ("buy", "sell", "rise", "join", "make", "take", "pay", "raise", "help", "report"),
    "VBG": ("buying", "selling", "rising", "falling", "making", "taking"),
    "VBN": ("bought", "sold", "approved", "expected", "reported", "made", "taken"),
    "MD": ("will", "would", "could", "may", "might", "should"),
    "TO": ("to",),
    "IN": ("of", "in", "for", "on", "with", "at", "from", "as", "into", "after", "by"),
    "IN:that": ("that",),
    "IN:sub": ("because", "although", "while", "if", "since"),
    "IN:qp": ("about", "over"),
    "IN:than": ("than",),
    "IN:by": ("by",),
    "CC": ("and", "but", "or"),
    "CD": ("1", "2", "10", "29", "61", "100", "three", "five", "million", "1989"),
    "WDT": ("that", "which"),
    "WP": ("who", "what"),
    "POS": ("'s",),
    "RP": ("up", "out", "off", "down"),
    "$": ("$",),
    ",": (",",),
    ".": (".",),
    ":": (";", "--"),
    "``": ("``",),
    "''": ("''",),
    "-LRB-": ("-LRB-",),
    "-RRB-": ("-RRB-",),
}

START_SYMBOL = "S:top"


def _label(symbol: str) -> str:
    # ":" is itself a POS tag (for ; and --), not a variant separator.
    return symbol if symbol == ":" else symbol.split(":", 1)[0]


_LABELS = {symbol: _label(symbol) for symbol in list(GRAMMAR) + list(LEXICON)}


class _TooLong(Exception):
    """Raised while sampling once a tree has more than MAX_WORDS words."""


def _min_heights() -> Dict[str, int]:
    """The least height of a subtree each symbol can produce (POS tags: 1)."""
    heights = {tag: 1 for tag in LEXICON}
    changed = True
    while changed:  # fixed point: a rule's height is 1 + its tallest symbol
        changed = False
        for symbol, rules in GRAMMAR.items():
            for _, rhs in rules:
                if all(s in heights for s in rhs):
                    height = 1 + max(heights[s] for s in rhs)
                    if height < heights.get(symbol, 10 ** 9):
                        heights[symbol] = height
                        changed = True
    missing = sorted(set(GRAMMAR) - set(heights))
    if missing:
        raise AssertionError(f"symbols that never finish: {missing}")
    return heights


class TreeSampler:
    """Samples trees from the grammar with a given ``random.Random``."""

    def __init__(self, rng: random.Random, max_height: int = MAX_HEIGHT):
        self.rng = rng
        self.max_height = max_height
        self._heights = _min_heights()
        self._words = 0  # words of the tree being sampled
        # (symbol, height budget) -> (cumulative weights, rules) of the rules that fit the budget
        self._choices: Dict[Tuple[str, int], Tuple[List[float], List[Tuple[str, ...]]]] = {}

    def _rules(self, symbol: str, budget: int) -> Tuple[List[float], List[Tuple[str, ...]]]:
        key = (symbol, budget)
        if key not in self._choices:
            fitting = [(w, rhs) for w, rhs in GRAMMAR[symbol]
                       if 1 + max(self._heights[s] for s in rhs) <= budget]
            cumulative, total = [], 0.0
            for weight, _ in fitting:
                total += weight
                cumulative.append(total)
            self._choices[key] = (cumulative, [rhs for _, rhs in fitting])
        return self._choices[key]

    def _expand(self, symbol: str, budget: int) -> Tree:
        if self._words > MAX_WORDS:
            raise _TooLong
        words = LEXICON.get(symbol)
        if words is not None:
            self._words += 1
            return Tree._trusted(_LABELS[symbol], [words[int(self.rng.random() * len(words))]])
        cumulative, rules = self._rules(symbol, budget)
        rhs = rules[bisect.bisect_right(cumulative, self.rng.random() * cumulative[-1])]
        return Tree._trusted(_LABELS[symbol], [self._expand(s, budget - 1) for s in rhs])

    def sample(self) -> Tree:
        """One tree with MIN_WORDS to MAX_WORDS words (longer or shorter ones are redrawn)."""
        while True:
            self._words = 0
            try:
                tree = self._expand(START_SYMBOL, self.max_height)
            except _TooLong:  # stop early instead of building a tree that will be thrown away
                continue
            if MIN_WORDS <= self._words <= MAX_WORDS:
                return tree


def generate_trees(count: int, seed: int = 1) -> List[Tree]:
    """``count`` trees sampled with ``random.Random(seed)``."""
    sampler = TreeSampler(random.Random(seed))
    return [sampler.sample() for _ in range(count)]


def generate_splits(train: int = 20000, valid: int = 1000, test: int = 1000, seed: int = 1
                    ) -> Dict[str, List[Tree]]:
    """Train/valid/test trees; a valid or test sentence never repeats an earlier split's sentence."""
    sampler = TreeSampler(random.Random(seed))
    seen: Set[Tuple[str, ...]] = set()
    splits: Dict[str, List[Tree]] = {}
    for name, count in (("train", train), ("valid", valid), ("test", test)):
        trees: List[Tree] = []
        own: Set[Tuple[str, ...]] = set()
        while len(trees) < count:
            tree = sampler.sample()
            words = tuple(tree.words())
            if words in seen:  # keeps evaluation sentences unseen in training
                continue
            own.add(words)
            trees.append(tree)
        seen |= own
        splits[name] = trees
    return splits


def write_treebank(out_dir: str, train: int = 20000, valid: int = 1000, test: int = 1000,
                   seed: int = 1) -> Dict[str, str]:
    """Write ``train.trees``, ``valid.trees`` and ``test.trees`` to ``out_dir``; return their paths."""
    os.makedirs(out_dir, exist_ok=True)
    paths = {}
    for name, trees in generate_splits(train, valid, test, seed).items():
        path = os.path.join(out_dir, f"{name}.trees")
        with open(path, "w", encoding="utf-8") as handle:
            handle.writelines(tree.to_string() + "\n" for tree in trees)
        paths[name] = path
    return paths


def main(argv: Optional[List[str]] = None) -> int:
    """Command line: write the synthetic treebank."""
    parser = argparse.ArgumentParser(
        prog="python -m vaswani_plugin.parsing.synthetic_treebank",
        description="Write a synthetic Penn-Treebank-style treebank (one tree per line).")
    parser.add_argument("--out", required=True, help="output directory")
    parser.add_argument("--train", type=int, default=20000, help="training trees (default: %(default)s)")
    parser.add_argument("--valid", type=int, default=1000, help="validation trees (default: %(default)s)")
    parser.add_argument("--test", type=int, default=1000, help="test trees (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=1, help="random seed (default: %(default)s)")
    args = parser.parse_args(argv)
    for name, path in write_treebank(args.out, args.train, args.valid, args.test, args.seed).items():
        print(f"{name}: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
