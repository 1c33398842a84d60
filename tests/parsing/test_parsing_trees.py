"""The Tree type and the Penn Treebank reader: normalisation, formats, errors."""
import pytest

from vaswani_plugin.parsing.trees import (Tree, TreebankError, parse_tree, parse_trees, read_treebank, save_trees,
                                          strip_function_tags)


def test_tree_accessors_and_to_string():
    tree = Tree("S", [Tree("NP", [Tree("DT", ["the"]), Tree("NN", ["dog"])]), Tree("VP", [Tree("VBD", ["ran"])])])
    assert tree.to_string() == "(S (NP (DT the) (NN dog)) (VP (VBD ran)))"
    assert tree.words() == ["the", "dog", "ran"]
    assert tree.tags() == ["DT", "NN", "VBD"]
    assert tree.pos() == [("the", "DT"), ("dog", "NN"), ("ran", "VBD")]
    assert [node.label for node in tree.subtrees()] == ["S", "NP", "DT", "NN", "VP", "VBD"]
    assert parse_tree(tree.to_string()) == tree
    copy = tree.copy()
    assert copy == tree and copy is not tree and copy.children[0] is not tree.children[0]


@pytest.mark.parametrize("label, children", [
    ("", [Tree("NN", ["x"])]),          # empty label
    ("N P", [Tree("NN", ["x"])]),       # space in label
    ("NP", []),                         # no children
    ("NN", ["a", "b"]),                 # two words under one tag
    ("NP", [Tree("NN", ["x"]), "y"]),   # a word without a tag
    ("NN", ["(x"]),                     # bracket in a word
])
def test_tree_constructor_rejects_invalid_nodes(label, children):
    with pytest.raises(ValueError):
        Tree(label, children)


def test_very_deep_tree_prints_without_recursion():
    tree = Tree("NN", ["x"])
    for _ in range(5000):
        tree = Tree("NP", [tree])
    assert tree.to_string().count("(NP") == 5000
    assert tree.copy() == tree


@pytest.mark.parametrize("raw, stripped", [
    ("NP-SBJ-1", "NP"), ("NP=2", "NP"), ("PP-LOC-CLR", "PP"), ("NP-SBJ=1", "NP"), ("S-TPC-1", "S"),
    ("ADVP-TMP", "ADVP"), ("WHNP-12", "WHNP"), ("PRP$", "PRP$"), ("NP", "NP"),
    ("-LRB-", "-LRB-"), ("-RRB-", "-RRB-"), ("-NONE-", "-NONE-"), ("-LCB-", "-LCB-"),
])
def test_strip_function_tags(raw, stripped):
    assert strip_function_tags(raw) == stripped


def test_traces_and_the_constituents_they_leave_empty_are_removed():
    # The EVALB README's example: SBAR and S dominate only traces, so both go.
    tree = parse_tree("(S (NP-SBJ (NNP He)) (VP (VBD reported) (SBAR (-NONE- 0) (S (-NONE- *T*-1)))) (. .))")
    assert tree.to_string() == "(S (NP (NNP He)) (VP (VBD reported)) (. .))"
    # An empty subject: NP-SBJ holds only a trace.
    tree = parse_tree("(S (NP-SBJ-1 (-NONE- *)) (VP (TO to) (VP (VB go))))")
    assert tree.to_string() == "(S (VP (TO to) (VP (VB go))))"


def test_traces_kept_on_request():
    tree = parse_tree("(S (NP-SBJ (-NONE- *)) (VP (VB go)))")
    kept = parse_trees("(S (NP-SBJ (-NONE- *-1)) (VP (VB go)))", remove_traces=False)[0]
    assert tree.words() == ["go"]
    assert kept.to_string() == "(S (NP (-NONE- *-1)) (VP (VB go)))"
    raw = parse_trees("(S (NP-SBJ=2 (NN x)))", strip_tags=False)[0]
    assert raw.label == "S" and raw.children[0].label == "NP-SBJ=2"


def test_function_tags_stripped_but_dashed_tags_kept():
    tree = parse_tree("(S (NP-SBJ-1 (NNP Ms.) (NNP Haag)) (VP (VBZ plays) (NP=2 (NNP Elianti)) "
                      "(PP-LOC-CLR (IN in) (NP (-LRB- -LRB-) (NN city) (-RRB- -RRB-)))) (. .))")
    assert tree.to_string() == ("(S (NP (NNP Ms.) (NNP Haag)) (VP (VBZ plays) (NP (NNP Elianti)) "
                                "(PP (IN in) (NP (-LRB- -LRB-) (NN city) (-RRB- -RRB-)))) (. .))")


@pytest.mark.parametrize("text", [
    "( (S (NP (PRP I)) (VP (VBD ran))) )",
    "(TOP (S (NP (PRP I)) (VP (VBD ran))))",
    "(ROOT (S (NP (PRP I)) (VP (VBD ran))))",
    "(S (NP (PRP I)) (VP (VBD ran)))",
])
def test_root_wrappers_are_normalised_away(text):
    assert parse_tree(text).to_string() == "(S (NP (PRP I)) (VP (VBD ran)))"


def test_wrapper_with_several_children_becomes_one_top_root():
    assert parse_tree("( (S (VP (VB Go))) (. .) )").to_string() == "(TOP (S (VP (VB Go))) (. .))"
    assert parse_tree("(NN word)").to_string() == "(TOP (NN word))"  # a root is always a phrase
    assert parse_tree("(TOP (NN word))").to_string() == "(TOP (NN word))"


MRG = """
( (S 
    (NP-SBJ (DT The) (NN cat) )
    (VP (VBD sat) 
      (PP-LOC (IN on) 
        (NP (DT the) (NN mat) )))
    (. .) ))
( (S 
    (NP-SBJ-1 (PRP It) )
    (VP (VBD wanted) 
      (S 
        (NP-SBJ (-NONE- *-1) )
        (VP (TO to) 
          (VP (VB sleep) ))))
    (. .) ))
( (FRAG (NP (NN Nothing) ) (. .) ))
"""


def test_multi_tree_mrg_file(tmp_path):
    path = tmp_path / "wsj_9999.mrg"
    path.write_text(MRG)
    trees = read_treebank(str(path))
    assert [t.to_string() for t in trees] == [
        "(S (NP (DT The) (NN cat)) (VP (VBD sat) (PP (IN on) (NP (DT the) (NN mat)))) (. .))",
        "(S (NP (PRP It)) (VP (VBD wanted) (S (VP (TO to) (VP (VB sleep))))) (. .))",
        "(FRAG (NP (NN Nothing)) (. .))",
    ]
    assert trees.skipped == 0 and trees.source == str(path)


def test_one_tree_per_line_file_and_save_round_trip(tmp_path):
    trees = parse_trees(MRG)
    path = tmp_path / "out.trees"
    save_trees(str(path), trees)
    assert len(path.read_text().splitlines()) == 3
    assert read_treebank(str(path)) == trees


def _error(text, **options):
    with pytest.raises(TreebankError) as caught:
        parse_trees(text, "bank.mrg", **options)
    return caught.value


def test_missing_close_bracket_at_end_of_file():
    error = _error("(S (NP (NN a)))\n(S (NP (NN b))\n   (VP (VBD c))\n")
    assert error.source == "bank.mrg" and error.line == 2
    assert str(error).startswith("bank.mrg, line 2: ") and "expected 1 more ')'" in str(error)
    assert "end of the input at line 3" in str(error)


def test_missing_close_bracket_before_next_tree():
    error = _error("(S (NP (NN a))\n(S (NP (NN b)))\n")
    assert error.line == 1 and "before the next tree starts at line 2" in str(error)


def test_extra_close_bracket():
    error = _error("(S (NP (NN a)))\n(S (NP (NN b))))\n")
    assert error.line == 2 and "extra ')'" in str(error)
    assert _error(")\n(S (NN a))").line == 1


def test_leaf_without_a_tag():
    error = _error("(S\n  (NP the dog)\n  (VP (VBD ran)))")
    assert error.line == 2 and "'dog' has no POS tag" in str(error) and "(TAG dog)" in str(error)
    error = _error("(S (NP (DT the)\n  dog))")
    assert error.line == 2 and "'dog' has no POS tag" in str(error)


@pytest.mark.parametrize("text, line, words", [
    ("", 1, "empty"),
    ("  \n\n ", 1, "empty"),
    ("(S (NP (NN a)))\nword (S (NN b))", 2, "expected '(' to start a tree, found 'word'"),
    ("(S (NP (NN a))\n ())", 2, "empty brackets"),
    ("(S\n ((NN x)))", 2, "expected a label"),
    ("(S (NP))", 1, "empty constituent '(NP)'"),
    ("(S (NP-SBJ (-NONE- *)))", 1, "no words left"),
])
def test_malformed_input_names_line_and_expectation(text, line, words):
    error = _error(text)
    assert error.line == line and words in str(error)


def test_unreadable_files(tmp_path):
    with pytest.raises(TreebankError, match="missing.mrg.*cannot read"):
        read_treebank(str(tmp_path / "missing.mrg"))
    bad = tmp_path / "latin1.mrg"
    bad.write_bytes(b"(S (NN a))\n(S (NN caf\xe9))\n")
    with pytest.raises(TreebankError, match=r"latin1.mrg, line 2: expected utf-8"):
        read_treebank(str(bad))
    empty = tmp_path / "empty.mrg"
    empty.write_text("")
    with pytest.raises(TreebankError, match=r"empty.mrg, line 1: the input is empty"):
        read_treebank(str(empty))


def test_skip_bad_trees_counts_them(tmp_path):
    path = tmp_path / "mixed.trees"
    path.write_text("(S (NN a))\n"
                    "(S (NP the dog))\n"          # leaf without a tag
                    "(S (NN b))\n"
                    "(S (NN c)))\n"               # extra bracket: this tree is bad too
                    "(S (NP (NN d))\n"            # missing bracket, detected at the next tree
                    "(S (NN e))\n")
    with pytest.raises(TreebankError):
        read_treebank(str(path))
    trees = read_treebank(str(path), skip_bad_trees=True)
    assert [t.words() for t in trees] == [["a"], ["b"], ["e"]]
    assert trees.skipped == 3
    assert [error.line for error in trees.errors] == [2, 4, 5]
    assert all(error.source == str(path) for error in trees.errors)


def test_windows_line_endings():
    trees = parse_trees("(S (NN a))\r\n(S (NP (NN b))\r\n(S (NN c))\r\n", skip_bad_trees=True)
    assert [t.words() for t in trees] == [["a"], ["c"]]
    assert trees.errors[0].line == 2


def test_roots_can_be_kept_as_written():
    # EVALB counts the unlabelled root as a bracket; the reader keeps it on request (label "")
    raw = parse_trees("( (S (NP (NN dogs)) (VP (VBP bark))) )\n(ROOT (S (NN x)))\n", normalise_root=False)
    assert [tree.label for tree in raw] == ["", "ROOT"]
    assert raw[0].to_string() == "( (S (NP (NN dogs)) (VP (VBP bark))))"
    assert [tree.label for tree in parse_trees("( (S (NN x)) )\n(ROOT (S (NN x)))\n")] == ["S", "S"]
