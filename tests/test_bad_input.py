"""Bad checkpoints and over-long inputs through the real tools: one line naming the file or the
limit, a non-zero exit, no traceback (`checkpoint_errors`, `too_long_inputs`).

Conflicting flags and unknown preset names are covered in test_cli_end_to_end.py and test_model.py.
"""
from types import SimpleNamespace

import pytest
import torch
from conftest import TINY_TRANSLATION_MODEL as TINY
from helpers import run_tool as run

from vaswani_plugin.errors import ConfigError


def one_line_error(proc, *expected):
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    for text in expected:
        assert text in last, last
    return last


def bad_checkpoint(kind, good, tmp_path):
    path = tmp_path / f"{kind}.pt"
    if kind == "truncated":  # as a copy cut short would leave it
        path.write_bytes(good.read_bytes()[:4000])
    elif kind == "foreign":  # a torch.save of something that is not a fairseq checkpoint
        torch.save({"state_dict": {"w": torch.zeros(2)}}, path)
    elif kind == "not-torch":
        path.write_text("model weights\n")
    return path


BAD_CHECKPOINTS = [
    ("missing", "no such checkpoint file (--path)"),
    ("truncated", "not a readable checkpoint"),
    ("foreign", "not a fairseq checkpoint (found a dict with keys ['state_dict']"),
    ("not-torch", "not a checkpoint (starts with b'mode'"),
]


@pytest.mark.parametrize("kind,expected", BAD_CHECKPOINTS)
def test_loading_a_bad_checkpoint_says_what_the_file_is(small_trained, tmp_path, kind, expected):
    from fairseq import (
        checkpoint_utils,  # the loader of fairseq-generate, -interactive and the hub
    )

    path = bad_checkpoint(kind, small_trained["ckpt"], tmp_path)
    with pytest.raises(ConfigError) as error:
        checkpoint_utils.load_model_ensemble_and_task([str(path)])
    assert str(error.value).startswith(f"{path}: {expected}")


def test_generate_with_a_bad_checkpoint_stops_with_one_line(small_trained, tmp_path):
    path = bad_checkpoint("foreign", small_trained["ckpt"], tmp_path)
    proc = run("fairseq-generate", small_trained["bin"], "--user-dir", "vaswani_plugin", "--path", path,
               "--gen-subset", "test", check=False)
    one_line_error(proc, f"fairseq-generate: error: {path}: not a fairseq checkpoint")


def test_resuming_another_architecture_names_the_mismatch(small_trained, tmp_path):
    proc = run("fairseq-train", small_trained["bin"], "--user-dir", "vaswani_plugin", *TINY, "--d-model", "64",
               "--optimizer", "adam", "--max-update", 2, "--max-tokens", 2000, "--save-dir", tmp_path,
               "--restore-file", small_trained["ckpt"], "--disable-validation", check=False)
    one_line_error(proc, f"error: {small_trained['ckpt']}: parameters do not fit --arch vaswani_transformer",
                   "size mismatch for encoder.embedding.embed_tokens.weight: copying a param with shape "
                   "torch.Size([", "expected a checkpoint of the same architecture")


def test_an_explicit_restore_file_must_exist(tmp_path):
    # fairseq alone would start from scratch without a word; its default name may be absent (a first run)
    from fairseq import checkpoint_utils  # what fairseq-train calls to resume

    cfg = SimpleNamespace(restore_file=str(tmp_path / "typo.pt"))
    with pytest.raises(ConfigError, match=r"typo\.pt: no such checkpoint file \(--restore-file\)$"):
        checkpoint_utils.load_checkpoint(cfg, trainer=None)


def test_sources_over_the_limit_stop_with_fairseqs_message_or_are_skipped(small_trained):
    sources = (small_trained["work"] / "test.en").read_text(encoding="utf-8").splitlines()
    limit = sorted(len(s.split()) for s in sources)[len(sources) // 2]  # words + EOS > limit for about half
    fits = sum(len(s.split()) + 1 <= limit for s in sources)  # the joined vocabulary keeps whole words
    assert 0 < fits < len(sources)
    flags = [small_trained["bin"], "--user-dir", "vaswani_plugin", "--path", small_trained["ckpt"],
             "--gen-subset", "test",
             "--beam", 2, "--max-source-positions", limit]
    proc = run("fairseq-generate", *flags, check=False)
    one_line_error(proc, "is invalid", f"since max_positions=({limit}, ", "--skip-invalid-size-inputs-valid-test",
                   "--max-source-positions")
    assert "IndexError" not in proc.stderr
    proc = run("fairseq-generate", *flags, "--skip-invalid-size-inputs-valid-test")
    assert sum(line.startswith("H-") for line in proc.stdout.splitlines()) == fits
    assert f"{len(sources) - fits} samples have invalid sizes and will be skipped" in proc.stdout + proc.stderr
