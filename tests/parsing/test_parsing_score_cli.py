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


@pytest.fixture
def files(tmp_path):
    gold, pred = tmp_path / "gold.mrg", tmp_path / "pred.trees"
    gold.write_text(GOLD)
    pred.write_text(PRED)
    return str(gold), str(pred)


def test_cli_prints_evalb_report(files):
    gold, pred = files
    done = _cli("--gold", gold, "--pred", pred, "--params", "collins")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    # s1: 3 of 3; s2: gold S NP VP PP NP, test moves PP under S -> 4 of 5, test 5.
    assert "   1    3    0  100.00 100.00     3      3    3      0      2     2   100.00" in lines
    assert "   2    7    0   80.00  80.00     4      5    5      0      6     6   100.00" in lines
    assert "Bracketing FMeasure       =  87.50" in lines  # 7 of 8 both ways
    assert "Traceback" not in done.stderr


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
    assert main(["--gold", gold, "--pred", pred, "--summary-only"]) == 0
    out = capsys.readouterr().out
    assert "Bracketing FMeasure       =  87.50" in out and "   1    3    0" not in out


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
