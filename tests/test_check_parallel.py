"""vaswani_plugin.data.check_parallel: bad parallel corpora stop with the file, the line and what was
expected; `clean` removes (and counts) empty and badly proportioned pairs."""
import subprocess
import sys

import pytest

from vaswani_plugin.data.check_parallel import main

PROG = "python -m vaswani_plugin.data.check_parallel"


def _write(path, data: bytes):
    path.write_bytes(data)
    return str(path)


def _error(capsys, argv):
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"{PROG}: error: ") and err.count("\n") == 1  # one line, no traceback
    return err


def test_a_good_pair_passes(tmp_path, capsys):
    src = _write(tmp_path / "a.en", b"one two\nthree\n")
    tgt = _write(tmp_path / "a.de", "eins zwei\ndrei groß\n".encode())
    assert main(["check", src, tgt]) == 0
    assert "2 sentence pairs" in capsys.readouterr().out


@pytest.mark.parametrize("src_bytes, tgt_bytes, expected", [
    # different line counts: both files and the first line without a counterpart
    (b"one\ntwo\nthree\n", b"eins\nzwei\n", "{src} has 3 lines but {tgt} has 2; {src} line 3 has no counterpart"),
    (b"one\ntwo\nthree\n", b"eins\n  \ndrei\n", "{tgt} line 2: empty line; expected a sentence on every line"),
    # a latin-1 a-umlaut: the byte and its position
    (b"one\ntwo\n", b"eins\nzw\xe4i\n", "{tgt} line 2: byte 0xe4 at byte 3 is not UTF-8; expected UTF-8 text"),
    (b"one\rtwo\n", b"eins\n", "{src} line 1: carriage return inside the line"),
])
def test_bad_input_is_named_with_file_and_line(tmp_path, capsys, src_bytes, tgt_bytes, expected):
    src, tgt = _write(tmp_path / "a.en", src_bytes), _write(tmp_path / "a.de", tgt_bytes)
    assert expected.format(src=src, tgt=tgt) in _error(capsys, ["check", src, tgt])


def test_every_pair_of_files_is_checked(tmp_path, capsys):
    good = [_write(tmp_path / "g.en", b"a\n"), _write(tmp_path / "g.de", b"b\n")]
    bad = [_write(tmp_path / "b.en", b"a\n"), _write(tmp_path / "b.de", b"\n")]
    assert f"{bad[1]} line 1: empty line" in _error(capsys, ["check", *good, *bad])


def test_clean_drops_and_counts_empty_long_and_disproportionate_pairs(tmp_path, capsys):
    src = _write(tmp_path / "a.en", b"one two\n\nw w w w\na b c\nx\n")
    tgt = _write(tmp_path / "a.de", b"eins zwei\nnur\nw w w w\na\ny\r z\n")
    assert main(["clean", src, tgt, "--out-prefix", str(tmp_path / "out"), "--suffixes", "en", "de",
                 "--max-words", "3", "--max-ratio", "2"]) == 0
    out = capsys.readouterr().out
    # 5 pairs: kept "one two", "x" (1 vs 2 words: ratio 2); empty side 1, longer than 3 words 1, ratio 3 > 2: 1.
    assert "kept 2 of 5 pairs; removed 1 with an empty side, 1 longer than 3 words, 1 with a word-count ratio" in out
    assert (tmp_path / "out.en").read_text() == "one two\nx\n"
    assert (tmp_path / "out.de").read_text() == "eins zwei\ny  z\n"  # the carriage return became a space
    assert not (tmp_path / "out.en.part").exists()


def test_clean_still_refuses_unequal_line_counts(tmp_path, capsys):
    src = _write(tmp_path / "a.en", b"one\n")
    tgt = _write(tmp_path / "a.de", b"eins\nzwei\n")
    err = _error(capsys, ["clean", src, tgt, "--out-prefix", str(tmp_path / "out"), "--suffixes", "en", "de"])
    assert f"{tgt} line 2 has no counterpart" in err
    assert not (tmp_path / "out.en").exists()


def test_the_command_line_exits_1_without_a_traceback(tmp_path):
    src = _write(tmp_path / "a.en", b"one\n")
    tgt = _write(tmp_path / "a.de", b"\xff\n")
    proc = subprocess.run([sys.executable, "-m", "vaswani_plugin.data.check_parallel", "check", src, tgt],
                          check=False, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert f"{PROG}: error: {tgt} line 1: byte 0xff" in proc.stderr and "Traceback" not in proc.stderr
