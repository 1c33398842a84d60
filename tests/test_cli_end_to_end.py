"""The plugin through fairseq's real command-line tools, on a small corpus made by the test.

One module-scoped run of fairseq-preprocess -> fairseq-train serves all the tests here; each test
then exercises one entry point or one promise (schedule across resume, every sentence translated,
weights-only loading, one-line errors).
"""
import os

import numpy as np
import pytest
import torch

from helpers import ROOT, eq3, run_tool as run, train_inner_values, write_parallel_splits
from vaswani_plugin.data.synthetic_corpus import generate_pairs

TINY = ["--encoder-layers", "1", "--decoder-layers", "1", "--d-model", "32", "--d-ff", "64",
        "--attention-heads", "2"]
WARMUP, D_MODEL = 8, 32
N_TEST = 21  # not a multiple of 8: fairseq 0.12 would drop the last batch by default


def train_flags(data, save_dir, max_update):
    return [data, "--user-dir", "vaswani_plugin", "--arch", "vaswani_transformer", *TINY,
            "--share-all-embeddings", "--criterion", "label_smoothed_xent", "--optimizer", "adam",
            "--adam-betas", "(0.9, 0.98)", "--lr-scheduler", "inverse_sqrt_warmup", "--warmup-updates", WARMUP,
            "--max-tokens", 2000, "--max-update", max_update, "--save-dir", save_dir, "--seed", 3,
            "--log-format", "json", "--log-interval", 1, "--no-progress-bar", "--num-workers", 0]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    work = tmp_path_factory.mktemp("e2e")
    pairs = generate_pairs(300 + N_TEST, seed=5)
    write_parallel_splits(work, {"train": pairs[:280], "valid": pairs[280:300], "test": pairs[300:]})
    run("fairseq-preprocess", "--source-lang", "en", "--target-lang", "de", "--trainpref", work / "train",
        "--validpref", work / "valid", "--testpref", work / "test", "--destdir", work / "bin",
        "--joined-dictionary", "--workers", 1)
    first = run("fairseq-train", *train_flags(work / "bin", work / "ckpt", 12))
    resumed = run("fairseq-train", *train_flags(work / "bin", work / "ckpt", 16))
    return {"work": work, "bin": work / "bin", "ckpt": work / "ckpt", "first": first, "resumed": resumed}


def test_schedule_follows_eq3_and_survives_resume(trained):
    # fairseq logs, for update n, the rate it set afterwards for update n + 1
    first, resumed = train_inner_values(trained["first"], "lr"), train_inner_values(trained["resumed"], "lr")
    assert sorted(first) == list(range(1, 13)) and sorted(resumed) == list(range(13, 17))
    for n, lr in {**first, **resumed}.items():
        assert lr == pytest.approx(eq3(n + 1, D_MODEL, WARMUP), rel=1e-3), n
    log = trained["resumed"].stderr + trained["resumed"].stdout
    assert "Loaded checkpoint" in log and "@ 12 updates" in log


def test_generate_translates_every_sentence(trained):
    proc = run("fairseq-generate", trained["bin"], "--user-dir", "vaswani_plugin", "--path",
               trained["ckpt"] / "checkpoint_last.pt", "--gen-subset", "test", "--beam", 4, "--lenpen", 0.6,
               "--batch-size", 8, "--required-batch-size-multiple", 1)
    ids = sorted(int(line.split("\t")[0][2:]) for line in proc.stdout.splitlines() if line.startswith("H-"))
    assert ids == list(range(N_TEST))
    assert "BLEU" in proc.stdout


def test_generate_with_alignment_uses_the_explicit_weights_path(trained):
    proc = run("fairseq-generate", trained["bin"], "--user-dir", "vaswani_plugin", "--path",
               trained["ckpt"] / "checkpoint_last.pt", "--gen-subset", "test", "--beam", 4,
               "--batch-size", 32, "--required-batch-size-multiple", 1, "--print-alignment")
    alignments = [line for line in proc.stdout.splitlines() if line.startswith("A-")]
    assert len(alignments) == N_TEST and all("-" in line.split("\t")[1] for line in alignments)


def test_checkpoints_load_under_the_weights_only_default(trained):
    path = trained["ckpt"] / "checkpoint_last.pt"
    state = torch.load(path)  # torch >= 2.6: weights_only=True by default
    assert "model" in state and state["cfg"]["model"]["_name"] == "vaswani_transformer"


def test_checkpoint_with_namespace_loads_and_other_globals_stay_refused(trained, tmp_path):
    import argparse
    import decimal

    import vaswani_plugin  # noqa: F401  (registers the safe globals)
    from fairseq import checkpoint_utils

    state = torch.load(trained["ckpt"] / "checkpoint_last.pt")
    state["args"] = argparse.Namespace(arch="vaswani_transformer")  # as legacy fairseq checkpoints hold
    torch.save(state, tmp_path / "with_namespace.pt")
    assert checkpoint_utils.load_checkpoint_to_cpu(str(tmp_path / "with_namespace.pt"))["args"].arch

    state["args"] = decimal.Decimal("1.5")  # any other class is still refused
    torch.save(state, tmp_path / "with_decimal.pt")
    with pytest.raises(Exception, match="Unsupported global"):
        torch.load(tmp_path / "with_decimal.pt")

    # numpy numbers (fairseq's --eval-bleu metrics) load; numpy arrays of Python objects do not
    state["args"] = [np.array([3, 2, 1, 0]), np.float32(0.5), np.array([[1.5]]), np.array([True])]
    torch.save(state, tmp_path / "with_numbers.pt")
    assert torch.load(tmp_path / "with_numbers.pt")["args"][0].tolist() == [3, 2, 1, 0]
    state["args"] = np.array([decimal.Decimal("1.5")], dtype=object)
    torch.save(state, tmp_path / "with_objects.pt")
    with pytest.raises(Exception, match="ObjectDType"):
        torch.load(tmp_path / "with_objects.pt")


def test_interactive_from_anywhere_with_vaswani_user_dir_and_hub_interface(trained, tmp_path):
    user_dir = run("vaswani-user-dir").stdout.strip()
    assert user_dir == os.path.join(ROOT, "vaswani_plugin")  # the editable install points at this checkout
    src = (trained["work"] / "test.en").read_text(encoding="utf-8").splitlines()[:3]
    proc = run("fairseq-interactive", trained["bin"], "--user-dir", user_dir, "--path",
               trained["ckpt"] / "checkpoint_last.pt", "--beam", 4, "--source-lang", "en", "--target-lang", "de",
               stdin="\n".join(src) + "\n", cwd=tmp_path)
    assert sum(line.startswith("H-") for line in proc.stdout.splitlines()) == 3

    from vaswani_plugin.models.vaswani_transformer import VaswaniTransformerModel

    hub = VaswaniTransformerModel.from_pretrained(str(trained["ckpt"]), checkpoint_file="checkpoint_last.pt",
                                                  data_name_or_path=str(trained["bin"]))
    out = hub.translate(src, beam=4)
    assert len(out) == 3 and all(isinstance(s, str) for s in out)


def test_average_checkpoints_is_the_mean(trained, tmp_path):
    a, b = trained["ckpt"] / "checkpoint1.pt", trained["ckpt"] / "checkpoint_last.pt"
    out = tmp_path / "avg.pt"
    run("vaswani-average-checkpoints", "--inputs", a, b, "--output", out)
    avg, sa, sb = torch.load(out)["model"], torch.load(a)["model"], torch.load(b)["model"]
    for name in sa:
        torch.testing.assert_close(avg[name], (sa[name] + sb[name]) / 2)


@pytest.mark.parametrize("flags,expected", [
    (["--arch", "vaswani_transformer_huge"], "invalid choice: 'vaswani_transformer_huge'"),
    (["--arch", "vaswani_transformer", "--d-model", "30", "--attention-heads", "4"],
     "error: --d-model (30) must be divisible by --attention-heads (4)"),
    (["--arch", "vaswani_transformer_tiny", "--optimizer", "adam", "--lr-scheduler", "inverse_sqrt_warmup",
      "--warmup-updates", "0"],
     "error: --warmup-updates must be at least 1, got 0"),
])
def test_bad_flags_stop_with_one_line(trained, flags, expected):
    proc = run("fairseq-train", trained["bin"], "--user-dir", "vaswani_plugin", *flags, "--max-update", 1, "--max-tokens", 1000,
               "--save-dir", trained["work"] / "never", check=False)
    assert proc.returncode != 0
    assert expected in proc.stderr.strip().splitlines()[-1]
    assert "Traceback" not in proc.stderr


def test_share_all_embeddings_needs_a_joined_dictionary(tmp_path):
    for lang, text in (("en", "a b c\n"), ("de", "x y z\n")):
        (tmp_path / f"train.{lang}").write_text(text * 4)
    run("fairseq-preprocess", "--source-lang", "en", "--target-lang", "de", "--trainpref", tmp_path / "train",
        "--destdir", tmp_path / "bin", "--workers", 1)
    proc = run("fairseq-train", tmp_path / "bin", "--user-dir", "vaswani_plugin", "--arch", "vaswani_transformer",
               *TINY, "--share-all-embeddings", "--max-update", 1, "--max-tokens", 1000, "--save-dir", tmp_path / "ckpt",
               "--disable-validation", check=False)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "--share-all-embeddings needs a joined dictionary" in proc.stderr.strip().splitlines()[-1]


def test_hydra_train_with_the_shipped_config(trained, tmp_path):
    proc = run("fairseq-hydra-train", "--config-dir", os.path.join(ROOT, "recipes", "hydra"),
               "--config-name", "transformer_base", f"common.user_dir={os.path.join(ROOT, 'vaswani_plugin')}",
               f"task.data={trained['bin']}", "model.encoder_layers=1", "model.decoder_layers=1",
               "model.d_model=32", "model.d_ff=64", "model.attention_heads=2", "optimization.max_update=3",
               "common.log_interval=1", f"checkpoint.save_dir={tmp_path / 'ckpt'}", f"hydra.run.dir={tmp_path}",
               cwd=tmp_path)
    state = torch.load(tmp_path / "ckpt" / "checkpoint_last.pt")
    assert state["cfg"]["model"]["_name"] == "vaswani_transformer" and state["cfg"]["model"]["d_model"] == 32
    assert state["cfg"]["criterion"]["_name"] == "label_smoothed_xent"
    assert f"lr {eq3(4, 32, 4000):.6g}" in proc.stdout + proc.stderr  # the rate set after 3 updates
