"""`python -m vaswani_plugin.data.spm encode` with several files in one process, against
sentencepiece's own processor, and its one-line error for unmatched --input/--output."""
import pytest

from vaswani_plugin.data import spm

ENGLISH = ["the cat sits on the mat", "a dog runs in the park", "the children play with a ball"] * 20
GERMAN = ["die katze sitzt auf der matte", "ein hund rennt im park", "die kinder spielen mit einem ball"] * 20


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    work = tmp_path_factory.mktemp("spm")
    for name, lines in (("train.en", ENGLISH), ("train.de", GERMAN)):
        (work / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    spm.train([str(work / "train.en"), str(work / "train.de")], str(work / "spm"), vocab_size=60, threads=1)
    return work


def run_cli(capsys, *args):
    """spm.main as `python -m vaswani_plugin.data.spm` runs it: (exit status, stderr)."""
    try:
        spm.main([str(arg) for arg in args])
        status = 0
    except SystemExit as exit_:
        status = exit_.code
    return status, capsys.readouterr().err


def test_encode_writes_each_input_to_its_output_as_sentencepiece_splits_it(model, capsys):
    import sentencepiece

    processor = sentencepiece.SentencePieceProcessor(model_file=str(model / "spm.model"))
    inputs = [model / "train.en", model / "train.de"]
    outputs = [model / "out.en", model / "out.de"]
    status, stderr = run_cli(capsys, "encode", "--model", model / "spm.model", "--input", *inputs,
                             "--output", *outputs)
    assert status == 0, stderr
    for lines, source, output in zip((ENGLISH, GERMAN), inputs, outputs):
        expected = [" ".join(processor.encode(line, out_type=str)) for line in lines]
        assert output.read_text(encoding="utf-8").splitlines() == expected
        assert f"encoded {len(lines)} lines: {source} -> {output}" in stderr


def test_encode_refuses_unmatched_inputs_and_outputs_in_one_line(model, capsys):
    status, stderr = run_cli(capsys, "encode", "--model", model / "spm.model",
                             "--input", model / "train.en", model / "train.de", "--output", model / "only.en")
    assert status == 2
    assert stderr.splitlines()[-1].endswith(
        "error: --input names 2 file(s) but --output 1; expected one output per input")
    assert not (model / "only.en").exists()


@pytest.mark.parametrize("flag", ["--model", "--input"])
def test_encode_names_a_missing_file_in_one_line(model, flag, capsys):
    files = {"--model": model / "spm.model", "--input": model / "train.en"}
    files[flag] = model / "missing"
    status, stderr = run_cli(capsys, "encode", "--model", files["--model"], "--input", files["--input"],
                             "--output", model / "x")
    assert status == 2
    assert stderr.splitlines()[-1].endswith(f"error: {flag} {model / 'missing'}: no such file")
