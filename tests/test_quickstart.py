"""The README's first command, recipes/quickstart.sh, end to end with tiny settings."""
import os
import re
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_quickstart_runs_end_to_end_and_scores_every_test_sentence(tmp_path):
    env = dict(os.environ, WORK_DIR=str(tmp_path), TRAIN_PAIRS="400", VALID_PAIRS="20", TEST_PAIRS="13",
               VOCAB_SIZE="300", MAX_UPDATE="4", MAX_TOKENS="512", SAVE_EVERY="2", AVERAGE_LAST="2", WARMUP="2",
               THREADS="1")
    proc = subprocess.run(["bash", os.path.join(ROOT, "recipes", "quickstart.sh")], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # scored by vaswani_plugin.cli.score_bleu, which refuses unless there is one hypothesis per sentence
    assert re.search(r"^detokenized sacreBLEU on 13 sentences: \d+\.\d\d \(nrefs:1\|case:mixed", proc.stdout, re.M)
    assert re.search(r"^tokenized BLEU \(13a tokens, compounds split, the paper's way\): \d+\.\d\d$", proc.stdout, re.M)
    assert "averaging 2 checkpoints" in proc.stderr
    hyps = (tmp_path / "test.hyp.de").read_text(encoding="utf-8").splitlines()
    assert len(hyps) == 13
