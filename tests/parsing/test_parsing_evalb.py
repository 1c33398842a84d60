"""EVALB (COLLINS.prm) rules, each checked on a small example worked out by hand.

Spans are written [start, end) over the words that remain after punctuation
deletion, numbered from 0.
"""
import dataclasses

import pytest

from vaswani_plugin.parsing.evalb import (COLLINS, STATUS_ERROR, STATUS_OK, STATUS_SKIP, SentenceResult,
                                          evalb_f1, evalb_score, format_report, format_sentence, score_sentence)
from vaswani_plugin.parsing.trees import Tree, parse_tree, parse_trees

T = parse_tree


def counts(result):
    return (result.matched, result.gold_brackets, result.test_brackets, result.crossing)


CAT = "(S (NP (DT the) (NN cat)) (VP (VBD sat) (PP (IN on) (NP (DT the) (NN mat)))))"


def test_perfect_parse():
    # the0 cat1 sat2 on3 the4 mat5: S[0,6) NP[0,2) VP[2,6) PP[3,6) NP[4,6) -> 5 brackets, all matched
    r = score_sentence(1, T(CAT), T(CAT))
    assert r.status == STATUS_OK and counts(r) == (5, 5, 5, 0)
    assert (r.recall, r.precision, r.words, r.correct_tags, r.length) == (100.0, 100.0, 6, 6, 6)


def test_crossing_brackets():
    # Sentence 1: perfect, 0 crossings.
    # Sentence 2: test S[0,6) X[0,4) NP[4,6). X[0,4) crosses gold VP[2,6) (0 < 2 < 4 < 6),
    #   so 1 crossing; matched S and NP[4,6): 2 of 5 gold, 2 of 3 test.
    # Sentence 3: gold a0 b1 c2 d3 e4: S[0,5) NP[0,2) VP[2,5) NP[3,5).
    #   test S[0,5) X[0,4) Y[1,4) W[1,3):
    #   X[0,4) crosses VP[2,5); Y[1,4) crosses NP[0,2); W[1,3) crosses NP[0,2) (and VP[2,5), still
    #   one crossing bracket) -> 3 crossings; only S matches: 1 of 4, 1 of 4.
    # Summary: average crossing (0+1+3)/3 = 1.33; no crossing 1/3 = 33.33; <=2 crossings 2/3 = 66.67.
    gold = [T(CAT), T(CAT), T("(S (NP (DT a) (NN b)) (VP (VBD c) (NP (DT d) (NN e))))")]
    test = [T(CAT), T("(S (X (DT the) (NN cat) (VBD sat) (IN on)) (NP (DT the) (NN mat)))"),
            T("(S (X (DT a) (Y (W (NN b) (VBD c)) (DT d))) (NN e))")]
    report = evalb_score(gold, test)
    assert [counts(r) for r in report.sentences] == [(5, 5, 5, 0), (2, 5, 3, 1), (1, 4, 4, 3)]
    s = report.all
    assert round(s.average_crossing, 2) == 1.33
    assert round(s.no_crossing_rate, 2) == 33.33 and round(s.two_or_less_crossing_rate, 2) == 66.67
    # totals: matched 5+2+1 = 8, gold 5+5+4 = 14, test 5+3+4 = 12
    # R = 8/14 = 57.14, P = 8/12 = 66.67, F = 2PR/(P+R) = 61.54; complete match 1/3 = 33.33
    assert (s.matched, s.gold_brackets, s.test_brackets) == (8, 14, 12)
    assert (round(s.recall, 2), round(s.precision, 2), round(s.f1, 2)) == (57.14, 66.67, 61.54)
    assert round(s.complete_match, 2) == 33.33


def test_advp_and_prt_are_the_same_label():
    # gold S[0,3) NP[0,1) VP[1,3) PRT[2,3); test has ADVP[2,3) instead of PRT -> still 4 of 4.
    # Tags: RP vs RB on "up" differ -> 2 of 3 correct = 66.67.
    gold = T("(S (NP (PRP He)) (VP (VBD gave) (PRT (RP up))))")
    r = score_sentence(1, gold, T("(S (NP (PRP He)) (VP (VBD gave) (ADVP (RB up))))"))
    assert counts(r) == (4, 4, 4, 0) and round(r.tag_accuracy, 2) == 66.67
    # PP is not equivalent: 3 of 4
    assert counts(score_sentence(1, gold, T("(S (NP (PRP He)) (VP (VBD gave) (PP (RP up))))"))) == (3, 4, 4, 0)


def test_punctuation_is_deleted_before_spans_are_computed():
    # "John , left ." -> punctuation words removed: John0 left1.
    # gold S[0,2) NP[0,1) VP[1,2); the test attaches "," inside NP and "." inside VP, which
    # does not change any span after deletion -> 3 of 3. Len counts punctuation (4);
    # Words/Tags count only the 2 remaining words.
    gold = T("(S (NP (NNP John)) (, ,) (VP (VBD left)) (. .))")
    r = score_sentence(1, gold, T("(S (NP (NNP John) (, ,)) (VP (VBD left) (. .)))"))
    assert counts(r) == (3, 3, 3, 0) and (r.length, r.words, r.correct_tags) == (4, 2, 2)
    # A bracket over punctuation only covers no word and is not counted: test brackets stay 3.
    r = score_sentence(1, gold, T("(S (NP (NNP John)) (PRN (, ,)) (VP (VBD left)) (. .))"))
    assert counts(r) == (3, 3, 3, 0)
    # The other deleted tags, `` : '' . -- Len counts all 6 words (`` We -- won '' .),
    # 2 remain for scoring, and the brackets S[0,2) NP[0,1) VP[1,2) are 3.
    quoted = T("(S (`` ``) (NP (PRP We)) (: --) (VP (VBD won)) ('' '') (. .))")
    r = score_sentence(1, quoted, quoted)
    assert (r.length, r.words, r.gold_brackets) == (6, 2, 3)


def test_unary_chains_count_every_bracket():
    # (S (VP (VB Stop))): S[0,1) and VP[0,1) are two brackets over the same span.
    gold = T("(S (VP (VB Stop)))")
    r = score_sentence(1, gold, Tree("VP", [Tree("VB", ["Stop"])]))
    assert counts(r) == (1, 2, 1, 0) and (r.recall, r.precision) == (50.0, 100.0)
    r = score_sentence(1, gold, T("(S (NP (VB Stop)))"))
    assert counts(r) == (1, 2, 2, 0)


def test_duplicate_spans_are_matched_as_multisets():
    # EVALB README [7] 5): gold has n=2 NP[0,2); test m=1 -> precision 100, recall 1/2.
    gold = T("(NP (NP (DT the) (NN man)))")
    r = score_sentence(1, gold, T("(NP (DT the) (NN man))"))
    assert counts(r) == (1, 2, 1, 0) and (r.recall, r.precision) == (50.0, 100.0)
    # m=3 > n=2 -> precision 2/3 = 66.67, recall 100
    r = score_sentence(1, gold, T("(NP (NP (NP (DT the) (NN man))))"))
    assert counts(r) == (2, 2, 3, 0) and round(r.precision, 2) == 66.67 and r.recall == 100.0


def test_top_bracket_is_not_counted_and_function_tags_are_stripped():
    # gold TOP is deleted: S[0,2) NP[0,1) VP[1,2) = 3; the test has no TOP and an NP-SBJ label.
    gold = Tree("TOP", [T("(S (NP (PRP I)) (VP (VBD ran)))")])
    test = Tree("S", [Tree("NP-SBJ", [Tree("PRP", ["I"])]), Tree("VP", [Tree("VBD", ["ran"])])])
    r = score_sentence(1, gold, test)
    assert counts(r) == (3, 3, 3, 0)
    assert evalb_score([gold], [test]).all.complete_matches == 1


def _long(words, trace=False, label="NP"):
    # (S (LABEL (NN w0) ... ) (. .)) or, with trace, (S (NP (-NONE- *)) (LABEL ...)) without the period
    body = Tree(label, [Tree("NN", [f"w{i}"]) for i in range(words)])
    if trace:
        return Tree("S", [Tree("NP", [Tree("-NONE-", ["*"])]), body])
    return Tree("S", [body, Tree(".", ["."])])


def test_length_40_block_counts_punctuation_but_not_traces():
    # s1 "I ran ." : Len 3, perfect: 3 of 3.
    # s2 40 words + "." : Len 41 (punctuation counts) -> only in the All block.
    #    gold S[0,40) NP[0,40); test S[0,40) VP[0,40) -> 1 of 2.
    # s3 40 words + a trace: Len 40 (traces do not count) -> in both blocks. The trace's NP covers
    #    no word and is not counted: S[0,40) NP[0,40) = 2 of 2.
    # All: matched 3+1+2 = 6 of 7 gold and 7 test -> R = P = F = 85.71; complete 2/3 = 66.67.
    # len<=40: s1 + s3 -> 5 of 5 = 100.
    gold = [T("(S (NP (PRP I)) (VP (VBD ran)) (. .))"), _long(40), _long(40, trace=True)]
    test = [gold[0], _long(40, label="VP"), _long(40, trace=True)]
    report = evalb_score(gold, test)
    assert [r.length for r in report.sentences] == [3, 41, 40]
    assert [counts(r) for r in report.sentences] == [(3, 3, 3, 0), (1, 2, 2, 0), (2, 2, 2, 0)]
    assert report.all.sentences == 3 and round(report.all.f1, 2) == 85.71
    assert round(report.all.complete_match, 2) == 66.67
    assert report.short.sentences == 2 and report.short.f1 == 100.0
    text = format_report(report)
    assert "-- len<=40 --" in text and "Number of sentence        =      2" in text


def test_error_sentences_are_reported_and_scored_both_ways():
    # s1 perfect: 3 of 3.
    # s2 "You left" vs "You went": Words unmatch -> error; its 3 gold brackets are set aside.
    # s3 test has one word more: Length unmatch (3|4) -> error; 3 gold brackets set aside.
    # s4 gold S NP VP PP NP (5); test attaches PP to S: S[0,6) NP[0,2) VP[2,3) PP[3,6) NP[4,6)
    #    -> matched S, NP, PP, NP = 4 of 5 gold, 4 of 5 test.
    # EVALB (errors left out): R = P = 7/8 = 87.50, F = 87.50.
    # Errors as empty parses: gold 8 + 3 + 3 = 14, R = 7/14 = 50.00, P = 87.50,
    #    F = 2 * 87.5 * 50 / 137.5 = 63.64.
    gold = [T("(S (NP (PRP I)) (VP (VBD ran)))"), T("(S (NP (PRP You)) (VP (VBD left)))"),
            T("(S (NP (DT the) (NN dog)) (VP (VBD barked)))"), T(CAT)]
    test = [gold[0], T("(S (NP (PRP You)) (VP (VBD went)))"),
            T("(S (NP (DT the) (NN dog)) (VP (VBD barked) (RB loudly)))"),
            T("(S (NP (DT the) (NN cat)) (VP (VBD sat)) (PP (IN on) (NP (DT the) (NN mat))))")]
    report = evalb_score(gold, test)
    assert [r.status for r in report.sentences] == [STATUS_OK, STATUS_ERROR, STATUS_ERROR, STATUS_OK]
    assert report.sentences[1].message == "Words unmatch (left|went)"
    assert report.sentences[2].message == "Length unmatch (3|4)"
    s = report.all
    assert (s.sentences, s.error_sentences, s.valid_sentences) == (4, 2, 2)
    assert (s.recall, s.precision, s.f1) == (87.5, 87.5, 87.5)
    assert (s.recall_with_failures, round(s.f1_with_failures, 2)) == (50.0, 63.64)
    assert evalb_f1(gold, test) == 87.5
    assert round(evalb_f1(gold, test, count_failures_as_empty=True), 2) == 63.64
    text = format_report(report)
    assert "Number of Error sentence  =      2" in text
    assert "   2 : error : Words unmatch (left|went)" in text and "   3 : error : Length unmatch (3|4)" in text
    # error lines print zeros except the length, like EVALB
    assert "   2    2    1    0.00   0.00     0      0    0      0      0     0     0.00" in text
    assert "Bracketing FMeasure       =  63.64" in text


def test_missing_parse_is_skipped_and_counted_as_empty():
    # s1 perfect (3 of 3); s2 has no parse -> skip, 3 gold brackets missed when scored as empty:
    # R = 3/6 = 50, P = 100, F = 66.67.
    gold = [T("(S (NP (PRP I)) (VP (VBD ran)))"), T("(S (NP (PRP We)) (VP (VBD won)))")]
    report = evalb_score(gold, [gold[0], None])
    assert report.sentences[1].status == STATUS_SKIP and report.all.skip_sentences == 1
    assert report.all.f1 == 100.0 and round(report.all.f1_with_failures, 2) == 66.67
    # a test tree with only punctuation has no words left: skipped too
    assert score_sentence(1, gold[0], T("(S (. .))")).status == STATUS_SKIP


def test_tagging_accuracy_and_mistagged_punctuation():
    # "the dog barks ." -> 3 scored words (the period is deleted); "dog" tagged VB: 2 of 3 = 66.67.
    gold = T("(S (NP (DT the) (NN dog)) (VP (VBZ barks)) (. .))")
    r = score_sentence(1, gold, T("(S (NP (DT the) (VB dog)) (VP (VBZ barks)) (. .))"))
    assert (r.words, r.correct_tags, round(r.tag_accuracy, 2)) == (3, 2, 66.67)
    # As in EVALB, each tree deletes by its own tags: a period tagged NN stays in the test
    # (4 words vs 3) and the sentence becomes a length error.
    r = score_sentence(1, gold, T("(S (NP (DT the) (NN dog)) (VP (VBZ barks)) (NN .))"))
    assert r.status == STATUS_ERROR and r.message == "Length unmatch (3|4)"


def test_unlabelled_scoring_option():
    unlabelled = dataclasses.replace(COLLINS, labeled=False)
    r = score_sentence(1, T("(S (NP (PRP I)) (VP (VBD ran)))"), T("(S (VP (PRP I)) (NP (VBD ran)))"), unlabelled)
    assert counts(r) == (3, 3, 3, 0)


def test_per_sentence_line_matches_evalb_column_layout():
    # The sample line from EVALB's README, section [4].
    r = SentenceResult(sent_id=1, length=8, status=0, matched=5, gold_brackets=5, test_brackets=5, crossing=0,
                       words=6, correct_tags=5)
    assert format_sentence(r) == "   1    8    0  100.00 100.00     5      5    5      0      6     5    83.33"


def test_report_layout():
    trees = parse_trees("(S (NP (PRP I)) (VP (VBD ran)) (. .))\n(S (NP (PRP We)) (VP (VBD won)))")
    lines = format_report(evalb_score(trees, trees)).splitlines()
    assert lines[0] == "  Sent.                        Matched  Bracket   Cross        Correct Tag"
    assert lines[1] == " ID  Len.  Stat. Recal  Prec.  Bracket gold test Bracket Words  Tags Accracy"
    assert lines[2] == lines[5] == "=" * 76
    assert lines[3] == "   1    3    0  100.00 100.00     3      3    3      0      2     2   100.00"
    assert lines[6] == "                100.00 100.00      6     6     6      0      4     4   100.00"
    assert lines[7:10] == ["=== Summary ===", "", "-- All --"]
    assert "Bracketing FMeasure       = 100.00" in lines
    assert lines[-1] == "=== Error and skipped sentences (0) ==="
    summary_only = format_report(evalb_score(trees, trees), per_sentence=False).splitlines()
    assert summary_only[3] == "=" * 76


def test_many_errors_note_and_mismatched_lists():
    gold = [T("(S (NP (PRP I)) (VP (VBD ran)))")] * 12
    text = format_report(evalb_score(gold, [T("(S (NP (PRP You)) (VP (VBD ran)))")] * 12))
    assert "note: 12 error sentences" in text and "Number of Valid sentence  =      0" in text
    with pytest.raises(ValueError, match="2 gold trees but 1 predicted"):
        evalb_score(gold[:2], gold[:1])
