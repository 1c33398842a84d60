"""python -m vaswani_plugin.parsing.prepare: outputs, the vocabulary cap, options and errors."""
import json
import os

import pytest

from vaswani_plugin.errors import ConfigError
from vaswani_plugin.parsing.prepare import load_config, main, prepare
from vaswani_plugin.parsing.trees import read_treebank

MRG = ("( (S (NP-SBJ (DT The) (NN dog)) (VP (VBD barked) (NP (-NONE- *T*-1))) (. .)) )\n"
       "( (S (NP-SBJ (PRP It)) (VP (VBD rained)) (. .)) )\n")
LINES = "(S (NP (PRP I)) (VP (VBD ran)) (. .))\n(S (NP (NNS Dogs)) (VP (VBP bark)))\n"


@pytest.fixture
def files(tmp_path):
    train, valid = tmp_path / "train.mrg", tmp_path / "valid.trees"
    train.write_text(MRG * 3)
    valid.write_text(LINES)
    return str(train), str(valid)


def test_prepare_writes_what_the_task_reads(files, tmp_path, capsys):
    train, valid = files
    out = str(tmp_path / "data")
    assert main(["--train", train, "--valid", valid, "--test", valid, "--out", out, "--scheme", "tags",
                 "--reverse-source", "--vocab-size", "16000"]) == 0
    assert "train: 6 trees" in capsys.readouterr().out
    config = load_config(out)
    assert config["scheme"] == "tags" and config["reverse_source"] is True
    assert config["vocab_size_requested"] == 16000 and config["vocab_size"] < 16000  # capped to what spm allows
    assert set(config["splits"]) == {"train", "valid", "test"}
    for name in ["spm.model", "dict.src.txt", "dict.tgt.txt", "train.src-tgt.src.bin", "test.src-tgt.tgt.idx"]:
        assert os.path.isfile(os.path.join(out, name)), name
    gold = read_treebank(os.path.join(out, config["splits"]["train"]["trees"]))
    assert gold[0].to_string() == "(S (NP (DT The) (NN dog)) (VP (VBD barked)) (. .))"  # traces and tags gone
    with open(os.path.join(out, "text", "train.tgt")) as handle:
        assert handle.readline().split() == "(S (NP DT NN )NP (VP VBD )VP . )S".split()
    with open(os.path.join(out, "text", "train.src")) as handle:
        assert "".join(handle.readline().split()).replace("\u2581", " ").split() == [".", "barked", "dog", "The"]


def test_prepare_errors(files, tmp_path):
    train, valid = files
    out = str(tmp_path / "data")
    prepare({"train": [train], "valid": [valid]}, out)
    with pytest.raises(ConfigError, match="already holds prepared data"):
        prepare({"train": [train], "valid": [valid]}, out)
    with pytest.raises(ConfigError, match="--valid needs at least one"):
        prepare({"train": [train], "valid": []}, str(tmp_path / "other"))
    bad = tmp_path / "bad.trees"
    bad.write_text(LINES + "(S (NP the dog) (VP (VBD ran)))\n")
    with pytest.raises(ConfigError, match="bad.trees, line 3.*--skip-bad-trees"):
        prepare({"train": [str(bad)], "valid": [valid]}, str(tmp_path / "other"))
    config = prepare({"train": [str(bad)], "valid": [valid]}, str(tmp_path / "skipping"), skip_bad_trees=True)
    assert config["splits"]["train"]["skipped_bad_trees"] == 1 and config["splits"]["train"]["sentences"] == 2
    with pytest.raises(ConfigError, match="no parse_config.json"):
        load_config(str(tmp_path))
    with open(os.path.join(out, "parse_config.json"), "w") as handle:
        json.dump({"format": 99}, handle)
    with pytest.raises(ConfigError, match="format 99"):
        load_config(out)
