"""Every input sentence gets exactly one output, with fairseq's default --required-batch-size-multiple 8.

fairseq 0.12 alone drops the last batch when its size is not a multiple of 8 (13 sentences give 8
translations); `vaswani_plugin.fairseq_fixes.keep_last_batch` keeps it. 13 is not a multiple of 8 on purpose.
"""
import json

import numpy as np
import pytest
from conftest import TINY_TRANSLATION_MODEL as TINY
from helpers import run_tool as run

from vaswani_plugin.fairseq_fixes import keep_last_batch

N = 13


@pytest.mark.parametrize("max_tokens,max_sentences", [(12000, None), (12, None), (None, 5)])
def test_batches_cover_every_index_in_fairseq_order(max_tokens, max_sentences):
    # Against fairseq's own batches: the same ones, in the same order, plus the dropped tail.
    indices, sizes = np.arange(N), np.full(N, 5)
    ours = keep_last_batch.batch_by_size(indices, None, sizes, max_tokens, max_sentences, 8)
    theirs = keep_last_batch._fairseq_batch_by_size(indices, None, sizes, max_tokens, max_sentences, 8)
    assert sum(len(b) for b in theirs) < N  # fairseq alone loses sentences here
    assert all(np.array_equal(a, b) for a, b in zip(ours, theirs))
    assert np.concatenate(ours).tolist() == list(range(N))


def hypothesis_ids(stdout):
    return sorted(int(line.split("\t")[0][2:]) for line in stdout.splitlines() if line.startswith("H-"))


def test_generate_with_default_flags_translates_every_sentence(small_trained):
    proc = run("fairseq-generate", small_trained["bin"], "--user-dir", "vaswani_plugin",
               "--path", small_trained["ckpt"],
               "--gen-subset", "test", "--beam", 2, "--batch-size", 8)
    assert hypothesis_ids(proc.stdout) == list(range(N))


def test_hub_translate_returns_one_output_per_input(small_trained):
    from vaswani_plugin.models.vaswani_transformer import VaswaniTransformerModel

    # (fairseq's hub batches with a multiple of 1; this pins that it stays so with the plugin)
    hub = VaswaniTransformerModel.from_pretrained(str(small_trained["ckpt"].parent),
                                                  checkpoint_file="checkpoint_last.pt",
                                                  data_name_or_path=str(small_trained["bin"]), batch_size=5)
    src = (small_trained["work"] / "test.en").read_text(encoding="utf-8").splitlines()
    out = hub.translate(src, beam=2)
    assert len(src) == N and len(out) == N and all(isinstance(s, str) for s in out)


def test_validation_with_eval_bleu_scores_every_sentence(small_trained, tmp_path):
    proc = run("fairseq-train", small_trained["bin"], "--user-dir", "vaswani_plugin", *TINY, "--optimizer", "adam",
               "--lr", "1e-3", "--max-update", 1, "--max-tokens", 2000, "--batch-size", 8,
               "--save-dir", tmp_path, "--no-save", "--eval-bleu", "--eval-bleu-args", '{"beam": 1, "max_len_b": 5}',
               "--log-format", "json", "--no-progress-bar")
    valid = [json.loads(line[line.index("{"):]) for line in (proc.stdout + proc.stderr).splitlines()
             if '"valid_loss"' in line]
    assert len(valid) == 1 and "valid_bleu" in valid[0]
    # valid_bsz is the mean sentences per batch: 13 sentences in batches of at most 8 are 8 + 5.
    # fairseq alone would validate (and BLEU-score) one batch of 8.
    assert float(valid[0]["valid_bsz"]) == pytest.approx(N / 2)
