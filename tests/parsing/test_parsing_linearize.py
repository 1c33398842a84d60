"""linearize_tree / delinearize: formats, round trips and repairs of malformed sequences."""
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vaswani_plugin.parsing.linearize import delinearize, linearize_tree
from vaswani_plugin.parsing.schemes import PRETERMINAL, get_scheme, scheme_names
from vaswani_plugin.parsing.synthetic_treebank import generate_trees
from vaswani_plugin.parsing.trees import Tree, parse_tree

DOG = parse_tree("(S (NP (DT the) (NN dog)) (VP (VBD barked)) (. .))")
WORDS = ["the", "dog", "barked"]
TAGS = ["DT", "NN", "VBD"]


def test_vinyals_scheme():
    source, target = linearize_tree(DOG)
    assert source == ["the", "dog", "barked", "."]
    assert " ".join(target) == "(S (NP XX XX )NP (VP XX )VP XX )S"


def test_tags_scheme_and_reversed_source():
    source, target = linearize_tree(DOG, scheme="tags", reverse_source=True)
    assert source == [".", "barked", "dog", "the"]
    assert " ".join(target) == "(S (NP DT NN )NP (VP VBD )VP . )S"
    with pytest.raises(ValueError, match="unknown linearization scheme"):
        linearize_tree(DOG, scheme="xml")


HAND_BUILT = [
    "(S (NP (DT the) (NN dog)) (VP (VBD barked)) (. .))",
    "(S (VP (VB Go)))",                                      # unary chain
    "(NP (NP (NP (NN man))))",                               # repeated label, same span
    "(TOP (S (VP (VB Go))) (. .))",                          # TOP root with several children
    "(TOP (NN Yes))",                                        # one-word sentence
    "(S (NP (-LRB- -LRB-) (NN x) (-RRB- -RRB-)) (VP (VBZ is)) (. .))",
    "(X (XX XX) (NP (NN y) (VP (VB z))))",                  # a real tag and word spelt XX
]


@pytest.mark.parametrize("text", HAND_BUILT)
def test_round_trip_on_hand_built_trees(text):
    _assert_round_trip(parse_tree(text))


def _assert_round_trip(tree):
    """For every registered scheme: linearize -> delinearize (with the gold tags) is the identity, with
    one pre-terminal token per word and no repair; reversing the source changes nothing in the target."""
    words, tags = tree.words(), tree.tags()
    for name in scheme_names():
        source, target = linearize_tree(tree, name)
        assert source == words
        assert sum(get_scheme(name).classify(token).kind == PRETERMINAL for token in target) == len(words)
        result = delinearize(target, words, gold_tags=tags, scheme=name)
        assert result.tree == tree and result.repairs == {}, name
        reversed_source, reversed_target = linearize_tree(tree, name, reverse_source=True)
        assert reversed_source == words[::-1] and reversed_target == target
    result = delinearize(linearize_tree(tree, "tags")[1], words, scheme="tags")
    assert result.tree == tree and result.repairs == {}  # the "tags" scheme predicts the tags themselves


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(min_value=0, max_value=2 ** 32 - 1))
def test_round_trip_is_identity_on_generated_trees(seed):
    for tree in generate_trees(5, seed=seed):
        _assert_round_trip(tree)


# PTB-like trees of any shape: Penn labels and tags, brackets-as-tags, '$', punctuation, unary chains
LABELS = st.sampled_from(["S", "NP", "VP", "PP", "SBAR", "ADVP", "PRT", "WHNP", "TOP", "X", "XX", "NP$"])
TAG_WORDS = st.sampled_from([("DT", "the"), ("NN", "dog"), ("PRP$", "its"), ("-LRB-", "-LRB-"), (".", "."),
                             (",", ","), ("``", "``"), ("CD", "3"), ("XX", "XX"), ("$", "$"), ("NNP", "U.S.")])
PTB_LIKE = st.recursive(
    TAG_WORDS.map(lambda pair: Tree(pair[0], [pair[1]])),
    lambda children: st.tuples(LABELS, st.lists(children, min_size=1, max_size=4)).map(
        lambda pair: Tree(pair[0], pair[1])),
    max_leaves=25,
).filter(lambda tree: not tree.is_preterminal)


@settings(max_examples=150, deadline=None)
@given(tree=PTB_LIKE)
def test_round_trip_is_identity_on_ptb_like_trees(tree):
    _assert_round_trip(tree)


TOKENS = st.sampled_from(["(S", "(NP", "(VP", ")S", ")NP", ")VP", ")", "(", "XX", "NN", "", "(a)"])


@settings(max_examples=200, deadline=None)
@given(target=st.lists(TOKENS, max_size=30), words=st.lists(st.sampled_from(["a", "b", "c"]), min_size=1,
                                                            max_size=8))
def test_delinearize_always_yields_a_tree_over_the_words(target, words):
    tree, repairs = delinearize(target, words)
    assert tree.words() == words
    assert not tree.is_preterminal
    assert all(number > 0 for number in repairs.values())
    # the repaired tree is well formed: linearizing it again needs no repair
    assert delinearize(linearize_tree(tree, "tags")[1], words).repairs == {}


def _fix(target, words=WORDS, gold_tags=TAGS):
    result = delinearize(target, words, gold_tags=gold_tags)
    return result.tree.to_string(), dict(result.repairs)


GOLD = "(S (NP (DT the) (NN dog)) (VP (VBD barked)))"


def test_missing_closing_brackets_are_added():
    assert _fix("(S (NP XX XX )NP (VP XX") == (GOLD, {"missing_close": 2})


def test_extra_closing_bracket_is_dropped():
    assert _fix("(S (NP XX XX )NP (VP XX )VP )S )S") == (GOLD, {"extra_close": 1})
    assert _fix(")VP (S (NP XX XX )NP (VP XX )VP )S") == (GOLD, {"extra_close": 1})


def test_mismatched_closing_labels_keep_the_open_label():
    assert _fix("(S (NP XX XX )VP (VP XX )NP )S") == (GOLD, {"mismatched_close": 2})
    assert _fix("(S (NP XX XX ) (VP XX ) )") == (GOLD, {})  # unlabelled closers are fine


def test_too_many_preterminals_are_dropped_from_the_end():
    assert _fix("(S (NP XX XX )NP (VP XX XX )VP )S") == (GOLD, {"dropped_preterminal": 1})
    # dropping the last pre-terminal empties VP, which is removed as well
    assert _fix("(S (NP XX XX XX )NP (VP XX )VP )S") == (
        "(S (NP (DT the) (NN dog) (VBD barked)))", {"dropped_preterminal": 1, "empty_constituent": 1})


def test_too_few_preterminals_are_added_under_the_root():
    assert _fix("(S (NP XX )NP )S") == ("(S (NP (DT the)) (NN dog) (VBD barked))", {"added_preterminal": 2})
    tree, repairs = delinearize("(S (NP XX )NP )S", WORDS)  # no gold tags: placeholders
    assert tree.to_string() == "(S (NP (XX the)) (XX dog) (XX barked))"


def test_empty_or_rootless_sequences_get_a_top_root():
    assert _fix("") == ("(TOP (DT the) (NN dog) (VBD barked))", {"added_root": 1, "added_preterminal": 3})
    assert _fix("(NP XX XX )NP (VP XX )VP") == (
        "(TOP (NP (DT the) (NN dog)) (VP (VBD barked)))", {"added_root": 1})
    assert _fix("XX", ["Yes"], ["UH"]) == ("(TOP (UH Yes))", {"added_root": 1})


def test_empty_constituents_unlabelled_openers_and_bad_tokens():
    assert _fix("(S (NP )NP (VP XX XX XX )VP )S") == (
        "(S (VP (DT the) (NN dog) (VBD barked)))", {"empty_constituent": 1})
    assert _fix("( XX XX ) (VP XX )VP", gold_tags=None) == (
        "(TOP (X (XX the) (XX dog)) (VP (XX barked)))", {"unlabelled_open": 1, "added_root": 1})
    assert _fix(["(S", "", "XX", "(N)P", "XX", "XX", ")S"]) == (
        "(S (DT the) (NN dog) (VBD barked))", {"bad_token": 2})


def test_predicted_tags_are_used_without_gold_tags():
    tree, repairs = delinearize("(S (NP DT NN )NP (VP VBZ )VP )S", WORDS)
    assert tree.tags() == ["DT", "NN", "VBZ"] and repairs == {}
    assert repairs.count == 0 and repairs.describe() == ""
    _, repairs = delinearize("(S XX XX XX XX", WORDS)
    assert repairs.count == 2 and repairs.describe() == "dropped_preterminal: 1\nmissing_close: 1"


def test_invalid_arguments():
    with pytest.raises(ValueError, match="at least one word"):
        delinearize("(S XX )S", [])
    with pytest.raises(ValueError, match="2 gold tags for 3 words"):
        delinearize("(S XX )S", WORDS, gold_tags=["DT", "NN"])


def test_deeply_nested_repairs_do_not_recurse():
    tree, repairs = delinearize(["(NP"] * 3000 + ["XX"], ["x"])
    assert repairs == {"missing_close": 3000}
    assert tree.words() == ["x"] and isinstance(tree, Tree)
