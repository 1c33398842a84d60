"""The constrained-decoding mask: hand-made states, and random walks that only follow allowed tokens,
for every registered linearization scheme."""
import random

import pytest
import torch
from fairseq.data import Dictionary
from hypothesis import given, settings
from hypothesis import strategies as st

from vaswani_plugin.parsing.linearize import delinearize, linearize_tree
from vaswani_plugin.parsing.schemes import PRETERMINAL, get_scheme, scheme_names
from vaswani_plugin.parsing.synthetic_treebank import generate_trees
from vaswani_plugin.tasks.parse_constraints import (ParseState, TargetSymbols, allowed_next_tokens, count_words,
                                                    word_start_mask)

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


def state_after(symbols, d, prefix):
    """The carried state of one hypothesis after writing ``prefix``, token by token."""
    state = ParseState.initial(1)
    for symbol in prefix:
        state = state.advance(symbols, torch.tensor([0]), torch.tensor([d.index(symbol)]))
    return state


def allowed_symbols(d, symbols, prefix, words, max_len=100):
    state = state_after(symbols, d, prefix)
    mask = allowed_next_tokens(symbols, state, torch.tensor([words]), max_len, d.eos())[0]
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


def scheme_dictionary(scheme, orphan_open=True):
    """A target dictionary of the scheme's tokens on generated trees (as prepare's would hold)."""
    d = Dictionary()
    for tree in generate_trees(40, seed=11):
        for token in linearize_tree(tree, scheme)[1]:
            d.add_symbol(token)
    if orphan_open:
        d.add_symbol("(ORPHAN")  # its closing token is not in the dictionary: must never be opened
    d.add_symbol("madeupword0000")
    return d


@pytest.mark.parametrize("scheme", scheme_names())
@settings(max_examples=40, deadline=None)
@given(words=st.integers(min_value=1, max_value=12), slack=st.integers(min_value=0, max_value=30),
       seed=st.integers(min_value=0, max_value=2 ** 31))
def test_every_allowed_walk_is_a_well_formed_tree(scheme, words, slack, seed):
    d = scheme_dictionary(scheme)
    symbols = TargetSymbols(d, scheme)
    max_len = words + 2 + slack
    rng = random.Random(seed)
    prefix = []
    state = ParseState.initial(1)
    while True:
        allowed = allowed_next_tokens(symbols, state, torch.tensor([words]), max_len, d.eos())[0]
        choices = allowed.nonzero().flatten().tolist()
        assert choices, prefix
        token = rng.choice(choices)
        if token == d.eos():
            break
        prefix.append(d[token])
        state = state.advance(symbols, torch.tensor([0]), torch.tensor([token]))
        assert len(prefix) <= max_len
    result = delinearize(prefix, [f"w{i}" for i in range(words)], scheme=scheme)
    assert result.repairs == {}, (prefix, result.repairs)
    assert sum(get_scheme(scheme).classify(s).kind == PRETERMINAL for s in prefix) == words
    assert "(ORPHAN" not in prefix
