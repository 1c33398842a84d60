"""The synthetic PCFG treebank: determinism, coverage of Penn labels, lengths and files."""
import collections

from vaswani_plugin.parsing.synthetic_treebank import (LEXICON, MAX_WORDS, MIN_WORDS, generate_splits,
                                                       generate_trees, main, write_treebank)
from vaswani_plugin.parsing.trees import read_treebank

PTB_POS_TAGS = {
    "CC", "CD", "DT", "EX", "FW", "IN", "JJ", "JJR", "JJS", "LS", "MD", "NN", "NNS", "NNP", "NNPS", "PDT", "POS",
    "PRP", "PRP$", "RB", "RBR", "RBS", "RP", "SYM", "TO", "UH", "VB", "VBD", "VBG", "VBN", "VBP", "VBZ", "WDT",
    "WP", "WP$", "WRB", "#", "$", ".", ",", ":", "``", "''", "-LRB-", "-RRB-",
}


def test_deterministic_for_a_seed():
    first = [t.to_string() for t in generate_trees(50, seed=7)]
    assert first == [t.to_string() for t in generate_trees(50, seed=7)]
    assert first != [t.to_string() for t in generate_trees(50, seed=8)]


def test_trees_use_penn_labels_and_bounded_lengths():
    trees = generate_trees(2000, seed=3)
    lengths = [len(t.words()) for t in trees]
    assert MIN_WORDS == 4 and MAX_WORDS == 40
    assert min(lengths) >= MIN_WORDS and max(lengths) <= MAX_WORDS and max(lengths) > 30
    phrases = collections.Counter(n.label for t in trees for n in t.subtrees() if not n.is_preterminal)
    for label in ("S", "SBAR", "NP", "VP", "PP", "ADJP", "ADVP", "QP", "PRT", "PRN", "WHNP"):
        assert phrases[label] > 0, label
    tags = {tag for t in trees for tag in t.tags()}
    assert tags <= PTB_POS_TAGS and {",", ".", "``", "''", ":"} <= tags
    assert {tag.split(":")[0] if tag != ":" else tag for tag in LEXICON} <= PTB_POS_TAGS
    # coordination and relative clauses
    text = " ".join(t.to_string() for t in trees)
    assert "(CC " in text and "(SBAR (WHNP" in text
    assert all(t.label == "S" for t in trees)


def test_splits_do_not_share_sentences():
    splits = generate_splits(train=300, valid=40, test=40, seed=5)
    assert [len(splits[name]) for name in ("train", "valid", "test")] == [300, 40, 40]
    sentences = {name: {tuple(t.words()) for t in trees} for name, trees in splits.items()}
    assert not sentences["train"] & sentences["valid"]
    assert not (sentences["train"] | sentences["valid"]) & sentences["test"]


def test_write_treebank_and_cli(tmp_path, capsys):
    paths = write_treebank(str(tmp_path / "a"), train=30, valid=5, test=6, seed=2)
    assert sorted(paths) == ["test", "train", "valid"]
    assert [len(read_treebank(paths[name])) for name in ("train", "valid", "test")] == [30, 5, 6]
    assert main(["--out", str(tmp_path / "b"), "--train", "30", "--valid", "5", "--test", "6", "--seed", "2"]) == 0
    assert "train.trees" in capsys.readouterr().out
    for name in ("train", "valid", "test"):
        assert (tmp_path / "a" / f"{name}.trees").read_text() == (tmp_path / "b" / f"{name}.trees").read_text()
