"""linearize_tree / delinearize: formats, round trips and repairs of malformed sequences."""
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vaswani_plugin.parsing.linearize import delinearize, linearize_tree
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
    words, tags = tree.words(), tree.tags()
    source, target = linearize_tree(tree, "vinyals")
    result = delinearize(target, source, gold_tags=tags)
    assert result.tree == tree and result.repairs == {}
    source, target = linearize_tree(tree, "tags", reverse_source=True)
    assert source[::-1] == words
    result = delinearize(target, words)  # predicted tags are the gold ones here
    assert result.tree == tree and result.repairs == {}


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(min_value=0, max_value=2 ** 32 - 1))
def test_round_trip_is_identity_on_generated_trees(seed):
    for tree in generate_trees(5, seed=seed):
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
