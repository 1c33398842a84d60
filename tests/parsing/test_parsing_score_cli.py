"""vaswani-parse-score end to end (subprocess) and its argument/error handling (in process)."""
import os
import subprocess
import sys

import pytest

from vaswani_plugin.parsing.score_cli import main

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GOLD = ("( (S (NP-SBJ (PRP I)) (VP (VBD ran)) (. .)) )\n"
        "( (S (NP-SBJ (DT the) (NN cat))\n"
        "     (VP (VBD sat) (PP-LOC (IN on) (NP (DT the) (NN mat)))) (. .)) )\n")
PRED = ("(S (NP (PRP I)) (VP (VBD ran)) (. .))\n"
        "(S (NP (DT the) (NN cat)) (VP (VBD sat)) (PP (IN on) (NP (DT the) (NN mat))) (. .))\n")


def _cli(*args):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "vaswani_plugin.parsing.score_cli", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)


def _report(capsys, *args):
    """The lines main() prints for `args` (in process: the scores, not the process, are under test)."""
    assert main(list(args)) == 0
    return capsys.readouterr().out.splitlines()


@pytest.fixture
def files(tmp_path):
    gold, pred = tmp_path / "gold.mrg", tmp_path / "pred.trees"
    gold.write_text(GOLD)
    pred.write_text(PRED)
    return str(gold), str(pred)


def test_cli_prints_evalb_report(files):
    """The numbers EVALB (COLLINS.prm) gives on these raw files, worked by hand from its rules: the
    unlabelled root of each .mrg tree is a bracket (label "", not deleted: COLLINS.prm deletes only TOP),
    '.' is deleted with its word, NP-SBJ / PP-LOC are cut to NP / PP, Len. counts the punctuation.
    s1 words "I ran": gold ""[0,2) S[0,2) NP[0,1) VP[1,2) = 4; test S NP VP = 3, all matched:
       recall 3/4 = 75.00, precision 3/3 = 100.00.
    s2 words "the cat sat on the mat": gold ""[0,6) S[0,6) NP[0,2) VP[2,6) PP[3,6) NP[4,6) = 6;
       test S[0,6) NP[0,2) VP[2,3) PP[3,6) NP[4,6) = 5; matched S NP PP NP = 4 (VP spans differ);
       recall 4/6 = 66.67, precision 4/5 = 80.00; no test span crosses a gold span.
    all: recall 7/10 = 70.00, precision 7/8 = 87.50, F = 2 * 70 * 87.5 / 157.5 = 77.78."""
    gold, pred = files
    done = _cli("--gold", gold, "--pred", pred, "--params", "collins")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "   1    3    0   75.00 100.00     3      4    3      0      2     2   100.00" in lines
    assert "   2    7    0   66.67  80.00     4      6    5      0      6     6   100.00" in lines
    assert "Bracketing Recall         =  70.00" in lines
    assert "Bracketing Precision      =  87.50" in lines
    assert "Bracketing FMeasure       =  77.78" in lines
    assert "Traceback" not in done.stderr


def test_normalize_roots_removes_the_wrapper_from_both_files(files, capsys):
    """--normalize-roots: the gold roots lose their unlabelled wrapper, so s1 is 3 of 3 and s2 4 of 5
    (the brackets above without ""): recall = precision = F = 7/8 = 87.50."""
    gold, pred = files
    lines = _report(capsys, "--gold", gold, "--pred", pred, "--normalize-roots")
    assert "   1    3    0  100.00 100.00     3      3    3      0      2     2   100.00" in lines
    assert "   2    7    0   80.00  80.00     4      5    5      0      6     6   100.00" in lines
    assert "Bracketing FMeasure       =  87.50" in lines


@pytest.mark.parametrize("gold_text", [
    "( (S (NP (DT the) (NN dog)) (VP (VBZ barks) (ADVP (RB loudly)))) )\n",
    "( (S (NP (DT the) (NN dog))\n     (VP (VBZ barks)\n         (ADVP (RB loudly)))) )\n",  # as a .mrg lays it out
])
def test_issue_example_scores_as_evalb(tmp_path, capsys, gold_text):
    """The issue's case, one line or laid out as in a .mrg file: words "the dog barks loudly";
    gold ""[0,4) S[0,4) NP[0,2) VP[2,4) ADVP[3,4) = 5, test S NP VP ADVP = 4, all matched:
    recall 4/5 = 80.00, precision 4/4 = 100.00, F = 2 * 80 * 100 / 180 = 88.89."""
    gold, pred = tmp_path / "gold.mrg", tmp_path / "pred.trees"
    gold.write_text(gold_text)
    pred.write_text("(S (NP (DT the) (NN dog)) (VP (VBZ barks) (ADVP (RB loudly))))\n")
    report = _report(capsys, "--gold", str(gold), "--pred", str(pred), "--summary-only")
    assert "Bracketing Recall         =  80.00" in report
    assert "Bracketing Precision      = 100.00" in report
    assert "Bracketing FMeasure       =  88.89" in report


def test_traces_are_deleted_as_evalb_deletes_them(tmp_path, capsys):
    """A trace's word is deleted and its now empty NP[0,0) not counted; Len. leaves traces out but counts '.':
    words "go": gold ""[0,1) S[0,1) VP[0,1) = 3, test S VP = 2, matched 2: recall 66.67, precision 100.00."""
    gold, pred = tmp_path / "gold.mrg", tmp_path / "pred.trees"
    gold.write_text("( (S (NP-SBJ (-NONE- *)) (VP (VB go)) (. .)) )\n")
    pred.write_text("(S (VP (VB go)) (. .))\n")
    lines = _report(capsys, "--gold", str(gold), "--pred", str(pred))
    assert "   1    2    0   66.67 100.00     2      3    2      0      1     1   100.00" in lines


def test_cli_bad_file_gives_one_line_and_nonzero_exit(tmp_path, files):
    gold, _ = files
    bad = tmp_path / "bad.trees"
    bad.write_text("(S (NP (PRP I)) (VP (VBD ran)))\n(S (NP the cat) (VP (VBD sat)))\n")
    done = _cli("--gold", gold, "--pred", str(bad))
    assert done.returncode == 1 and done.stdout == ""
    message = [line for line in done.stderr.splitlines() if not line.startswith("INFO:")]
    assert len(message) == 1 and "Traceback" not in done.stderr
    assert f"{bad}, line 2:" in message[0] and "'cat' has no POS tag" in message[0]


def test_main_in_process(files, capsys):
    gold, pred = files
    out = "\n".join(_report(capsys, "--gold", gold, "--pred", pred, "--summary-only"))
    assert "Bracketing FMeasure       =  77.78" in out and "   1    3    0" not in out


def test_main_errors(files, tmp_path, capsys):
    gold, pred = files
    assert main(["--gold", str(tmp_path / "nope.mrg"), "--pred", pred]) == 1
    assert "nope.mrg: cannot read the file" in capsys.readouterr().err
    one = tmp_path / "one.trees"
    one.write_text("(S (NN x))\n")
    assert main(["--gold", gold, "--pred", str(one)]) == 1
    assert "has 1 trees but" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exited:
        main(["--gold", gold, "--pred", pred, "--params", "magerman"])
    assert exited.value.code == 2
    with pytest.raises(SystemExit) as exited:
        main(["--help"])
    assert exited.value.code == 0 and "--gold GOLD" in capsys.readouterr().out
