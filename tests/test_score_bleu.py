"""vaswani_plugin.cli.score_bleu: tokenized BLEU with compound splitting (the paper's way, §6.1),
checked against BLEU computed by hand, and the refusal to score a translation with missing sentences."""
import math

import pytest

from vaswani_plugin.cli.score_bleu import (
    main,
    read_hypotheses,
    split_compounds,
    tokenized_bleu,
)
from vaswani_plugin.errors import ConfigError


@pytest.mark.parametrize("line, expected", [
    ("rich-text format", "rich ##AT##-##AT## text format"),
    # Perl's s{(\S)-(\S)}{...}g resumes after the consumed "b": the second hyphen stays.
    ("a-b-c", "a ##AT##-##AT## b-c"),
    ("x - y", "x - y"),
    ("-5 and 5-", "-5 and 5-"),
])
def test_split_compounds_follows_get_ende_bleu(line, expected):
    assert split_compounds(line) == expected


def test_tokenized_bleu_with_compounds_split_matches_a_hand_computation():
    hyp, ref = ["der kinder-garten ist klein."], ["der kinder-garten ist groß."]
    # 13a splits the final period; compounds split: 7 tokens each,
    # "der kinder ##AT##-##AT## garten ist klein ." vs "... groß .": n-gram matches 6/7, 4/6, 3/5, 2/4.
    expected = 100 * (6 / 7 * 4 / 6 * 3 / 5 * 2 / 4) ** 0.25
    assert tokenized_bleu(hyp, ref).score == pytest.approx(expected, abs=1e-9)
    # Unsplit, 5 tokens: no 4-gram matches (0/2), and like multi-bleu.perl there is no smoothing.
    assert tokenized_bleu(hyp, ref, compounds=False).score == 0.0


def test_tokenized_bleu_brevity_penalty():
    # Hypothesis: 5 tokens after splitting, all n-grams match; reference: 7 tokens. BP = exp(1 - 7/5).
    score = tokenized_bleu(["der kinder-garten ist"], ["der kinder-garten ist groß ."]).score
    assert score == pytest.approx(100 * math.exp(1 - 7 / 5), abs=1e-9)


def _generate_output(path, hypotheses):
    lines = []
    for i, text in hypotheses:
        lines += [f"S-{i}\tsource {i}", f"H-{i}\t-0.5\t{text}", f"D-{i}\t-0.5\t{text}", f"P-{i}\t-0.1 -0.2"]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def test_hypotheses_are_put_back_in_input_order(tmp_path):
    _generate_output(tmp_path / "gen.out", [(2, "c"), (0, "a"), (1, "b")])
    assert read_hypotheses(str(tmp_path / "gen.out"), 3) == ["a", "b", "c"]


def test_a_missing_hypothesis_is_refused_with_the_fairseq_flag_to_fix_it(tmp_path):
    _generate_output(tmp_path / "gen.out", [(0, "a"), (2, "c")])
    with pytest.raises(ConfigError, match=r"2 hypotheses for 3 test sentences \(first missing: sentence 1\).*"
                                          r"--required-batch-size-multiple 1"):
        read_hypotheses(str(tmp_path / "gen.out"), 3)


def test_main_writes_the_hypotheses_and_prints_both_scores(tmp_path, capsys):
    _generate_output(tmp_path / "gen.out", [(1, "der kinder-garten ist"), (0, "der kinder-garten ist klein.")])
    (tmp_path / "ref").write_text("der kinder-garten ist groß.\nder kinder-garten ist groß .\n", encoding="utf-8")
    assert main(["--generate-output", str(tmp_path / "gen.out"), "--ref", str(tmp_path / "ref"),
                 "--hyp-out", str(tmp_path / "hyp")]) == 0
    out = capsys.readouterr().out
    assert "detokenized sacreBLEU on 2 sentences:" in out and "nrefs:1|case:mixed" in out
    assert "tokenized BLEU (13a tokens, compounds split, the paper's way):" in out
    assert (tmp_path / "hyp").read_text(encoding="utf-8") == "der kinder-garten ist klein.\nder kinder-garten ist\n"


def test_main_refuses_a_short_generate_output_in_one_line(tmp_path, capsys):
    _generate_output(tmp_path / "gen.out", [(0, "a")])
    (tmp_path / "ref").write_text("a\nb\n", encoding="utf-8")
    assert main(["--generate-output", str(tmp_path / "gen.out"), "--ref", str(tmp_path / "ref"),
                 "--hyp-out", str(tmp_path / "hyp")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("python -m vaswani_plugin.cli.score_bleu: error: ") and err.count("\n") == 1
    assert not (tmp_path / "hyp").exists()
