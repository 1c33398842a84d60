"""The constrained-decoding mask: hand-made states, and random walks that only follow allowed tokens."""
import random

import torch
from fairseq.data import Dictionary
from hypothesis import given, settings
from hypothesis import strategies as st

from vaswani_plugin.parsing.linearize import delinearize
from vaswani_plugin.tasks.parse_constraints import TargetSymbols, allowed_next_tokens, count_words, word_start_mask

LABELS = ["S", "NP", "VP", "PP", "SBAR", "TOP"]


def target_dictionary(preterminals=("XX",), orphan_open=False):
    d = Dictionary()
    for label in LABELS:
        d.add_symbol("(" + label)
        d.add_symbol(")" + label)
    for tag in preterminals:
        d.add_symbol(tag)
    if orphan_open:
        d.add_symbol("(ADJP")  # no ")ADJP" in the dictionary: must never be opened
    d.add_symbol("madeupword0000")
    return d


def allowed_symbols(d, symbols, prefix, words, max_len=100):
    tokens = torch.tensor([[d.index(s) for s in prefix]], dtype=torch.long).view(1, len(prefix))
    mask = allowed_next_tokens(symbols, tokens, torch.tensor([words]), max_len, d.eos())[0]
    return {d[i] for i in mask.nonzero().flatten().tolist()}


def test_states_by_hand():
    d = target_dictionary(orphan_open=True)
    symbols = TargetSymbols(d)
    opens = {"(" + label for label in LABELS}
    assert allowed_symbols(d, symbols, [], 2) == opens  # a tree starts with a phrase; "(ADJP" never
    assert allowed_symbols(d, symbols, ["(S"], 2) == opens | {"XX"}  # an empty phrase cannot close
    assert allowed_symbols(d, symbols, ["(S", "(NP", "XX"], 2) == opens | {"XX", ")NP"}
    # all words covered: no new phrase or pre-terminal; the inner phrase closes, the root after it
    assert allowed_symbols(d, symbols, ["(S", "(NP", "XX", "XX"], 2) == {")NP"}
    assert allowed_symbols(d, symbols, ["(S", "(NP", "XX", "XX", ")NP"], 2) == {")S"}
    assert allowed_symbols(d, symbols, ["(S", "(NP", "XX", ")NP", "XX", ")S"], 2) == {"</s>"}
    # the root does not close before every word has its pre-terminal
    assert allowed_symbols(d, symbols, ["(S", "XX"], 2) == opens | {"XX"}
    # the innermost label is found behind closed siblings
    assert allowed_symbols(d, symbols, ["(S", "(VP", "(NP", "XX", ")NP", "(PP", "XX", ")PP"], 3) == \
        opens | {"XX", ")VP"}


def test_length_guard():
    d = target_dictionary()
    symbols = TargetSymbols(d)
    # 2 words need (S XX XX )S = 4 tokens; with max_len 4 the first token may only open the root
    assert allowed_symbols(d, symbols, ["(S"], 2, max_len=4) == {"XX"}
    assert allowed_symbols(d, symbols, ["(S"], 2, max_len=5) == {"XX"}  # (S (NP XX XX )NP )S needs 6
    assert allowed_symbols(d, symbols, ["(S"], 2, max_len=6) == {"XX"} | {"(" + label for label in LABELS}
    assert allowed_symbols(d, symbols, [], 2, max_len=3) == {"</s>"}  # cannot fit: let it end


def test_word_counts_from_pieces():
    src = Dictionary()
    for piece in ["\u2581the", "\u2581do", "g", "\u2581", "\u00e9", "s"]:
        src.add_symbol(piece)
    starts = word_start_mask(src)
    line = ["\u2581the", "\u2581do", "g", "s", "\u2581", "\u00e9"]  # "the dogs é"
    tokens = torch.tensor([[src.pad()] + [src.index(p) for p in line] + [src.eos()]])
    assert count_words(tokens, starts).tolist() == [3]


@settings(max_examples=60, deadline=None)
@given(words=st.integers(min_value=1, max_value=12), slack=st.integers(min_value=0, max_value=30),
       seed=st.integers(min_value=0, max_value=2 ** 31), tags=st.booleans())
def test_every_allowed_walk_is_a_well_formed_tree(words, slack, seed, tags):
    d = target_dictionary(preterminals=("NN", "VB", "DT", ".") if tags else ("XX",), orphan_open=True)
    symbols = TargetSymbols(d)
    max_len = words + 2 + slack
    rng = random.Random(seed)
    prefix = []
    while True:
        tokens = torch.tensor([[d.index(s) for s in prefix]], dtype=torch.long).view(1, len(prefix))
        allowed = allowed_next_tokens(symbols, tokens, torch.tensor([words]), max_len, d.eos())[0]
        choices = allowed.nonzero().flatten().tolist()
        assert choices, prefix
        token = d[rng.choice(choices)]
        if token == "</s>":
            break
        prefix.append(token)
        assert len(prefix) <= max_len
    result = delinearize(prefix, [f"w{i}" for i in range(words)])
    assert result.repairs == {}, (prefix, result.repairs)
    assert sum(not s.startswith(("(", ")")) for s in prefix) == words
